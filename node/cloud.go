package node

import (
	"context"
	"errors"

	"fusion/engine"
	"fusion/router/cloud"
	"fusion/router/servedby"
)

// CloudSettingsKey is the replicated setting that holds the cloud
// upstreams' configuration (router/cloud's document, written through
// PUT /admin/api/cloud with the generic setting command).
const CloudSettingsKey = "admin/cloud"

// applyCloud puts the cloud configuration in force: the stored one once
// there is one, else the --cloud-config file's. Called under applyMu.
func (n *Node) applyCloud() {
	cfg, _ := n.cloudConfig()
	n.cloud.SetConfig(cfg)
}

// cloudConfig is the configuration in force and where it comes from.
func (n *Node) cloudConfig() (cloud.Config, string) {
	if b, ok := n.admin.store.Setting(CloudSettingsKey); ok {
		cfg, err := cloud.Parse(b)
		if err == nil {
			if n.member != nil {
				return cfg, "cluster"
			}
			return cfg, "node"
		}
		// Checked before it was written; never expected.
		n.cfg.Logger.Warn("stored cloud configuration not usable; the file's stays in force", "err", err)
	}
	if len(n.cfg.Cloud.Upstreams) > 0 {
		return n.cfg.Cloud, "file"
	}
	return cloud.Config{}, "none"
}

// nodeCloud is the admin API's view of the cloud configuration.
type nodeCloud struct{ n *Node }

func (c nodeCloud) CloudConfig() (cloud.Config, string) { return c.n.cloudConfig() }

func (c nodeCloud) PutCloudConfig(ctx context.Context, doc []byte) error {
	return c.n.admin.store.PutSetting(ctx, CloudSettingsKey, doc)
}

func (c nodeCloud) CloudKeys() map[string]error { return c.n.cloud.KeyStatus() }

// cloudEngine is the frontend's engine with the cloud in front: a request
// with backend_override "cloud" goes to its upstream, and a request the
// cluster refuses at admission with a 429 or 503 goes there too when its
// model has cloud_fallback. The call is made by this node, the one the
// client reached (a forwarded request never carries "cloud"), with the
// key read from this node's environment or file.
type cloudEngine struct {
	aliasEngine
	cloud *cloud.Client
}

func (e cloudEngine) Generate(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	if id := e.a.resolve(req.Model); id != req.Model {
		r := *req
		r.Model = id
		req = &r
	}
	if req.Backend == engine.BackendCloud {
		return e.toCloud(ctx, req)
	}
	ch, err := e.Dispatcher.Generate(ctx, req)
	if err == nil || !(errors.Is(err, engine.ErrOverloaded) || errors.Is(err, engine.ErrUnavailable)) ||
		!e.a.cloudFallback(req.Model) || !e.cloud.Serves(req.Model) || ctx.Err() != nil {
		return ch, err
	}
	out, cerr := e.toCloud(ctx, req)
	if cerr != nil {
		// The local refusal stays the answer: the fallback was only a
		// chance, and a cloud outage must not change what local clients
		// are told.
		return nil, errors.Join(err, cerr)
	}
	return out, nil
}

func (e cloudEngine) toCloud(ctx context.Context, req *engine.Request) (<-chan engine.Event, error) {
	ch, err := e.cloud.Generate(ctx, req)
	if err == nil {
		if rt, ok := e.cloud.Config().Route(req.Model); ok {
			servedby.Report(ctx, "cloud:"+rt.Upstream.Name)
		}
	}
	return ch, err
}
