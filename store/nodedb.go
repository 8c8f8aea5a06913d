package store

import (
	"errors"
	"fmt"
	"time"

	"go.etcd.io/bbolt"
)

// NodeDB is the node-local bbolt file (<data-dir>/node.db): what one node
// keeps for itself across restarts, in named buckets of key → value.
type NodeDB struct {
	db *bbolt.DB
}

// OpenNodeDB opens or creates the file at path. A file held by another
// process is an error after timeout (1 s when ≤ 0).
func OpenNodeDB(path string, timeout time.Duration) (*NodeDB, error) {
	if timeout <= 0 {
		timeout = time.Second
	}
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{Timeout: timeout})
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			return nil, fmt.Errorf("store: %s is locked by another process: %w", path, err)
		}
		return nil, fmt.Errorf("store: %w", err)
	}
	return &NodeDB{db: db}, nil
}

// Get returns the value of key in bucket (nil, false when absent).
func (d *NodeDB) Get(bucket, key string) ([]byte, bool, error) {
	var out []byte
	err := d.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		if v := b.Get([]byte(key)); v != nil {
			out = append([]byte{}, v...)
		}
		return nil
	})
	if err != nil {
		return nil, false, fmt.Errorf("store: %w", err)
	}
	return out, out != nil, nil
}

// Put writes key in bucket (created if missing), durably.
func (d *NodeDB) Put(bucket, key string, value []byte) error {
	err := d.db.Update(func(tx *bbolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), value)
	})
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// All returns every key of bucket with its value.
func (d *NodeDB) All(bucket string) (map[string][]byte, error) {
	out := map[string][]byte{}
	err := d.db.View(func(tx *bbolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			out[string(k)] = append([]byte{}, v...)
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return out, nil
}

// Close closes the file.
func (d *NodeDB) Close() error { return d.db.Close() }
