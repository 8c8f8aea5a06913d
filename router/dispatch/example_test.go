package dispatch_test

import (
	"context"
	"log"
	"net/http"

	"google.golang.org/grpc"

	"fusion/cluster/remote"
	"fusion/engine/runner"
	"fusion/router"
	"fusion/router/dispatch"
)

// Example shows how a node wires the data plane: its runner behind the
// Engine gRPC service for peers, and a dispatcher (local runner + peers
// through a client pool, loads from the peers' stats streams) as the
// engine of its HTTP frontend. The cluster's routing table and its auth
// options (secret interceptors, TLS) come from the cluster package.
func Example() {
	var (
		table     dispatch.Table      // the cluster's routing table
		serverOpt []grpc.ServerOption // the cluster's auth interceptors, TLS
		dialOpt   []grpc.DialOption
	)
	run, err := runner.New(runner.Config{ModelsDir: "/var/fusion/models"})
	if err != nil {
		log.Fatal(err)
	}
	srv, err := remote.Listen(":7001", remote.ServerConfig{
		NodeID: table.Self(), Engine: run,
		Stats: func() remote.Stats {
			s := run.Stats()
			return remote.Stats{InFlight: s.InFlight, KVBytes: s.KVBytes}
		},
	}, serverOpt...)
	if err != nil {
		log.Fatal(err)
	}
	srv.Serve()
	defer srv.Stop(context.Background())

	pool := remote.NewPool(dialOpt...)
	defer pool.Close()
	loads := remote.NewLoads(pool, 0) // the table calls loads.Watch(addr) per peer and reads loads.Load(addr)
	defer loads.Close()

	d := dispatch.New(dispatch.Config{Local: run, Table: table, Connect: pool})
	log.Fatal(http.ListenAndServe(":8000", router.New(router.Config{Engine: d})))
}
