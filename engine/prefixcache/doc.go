// Package prefixcache keeps the KV blocks of prompts a model has already
// computed so that a later request sharing a prefix restores them instead
// of running the model over them again.
//
// A prompt is cut into blocks of BlockSize tokens. Block i is named by a
// hash chain, key_i = SHA-256(key_{i−1} ‖ tokens of block i), seeded with
// the model's identity (its weight files, the layers it runs, the KV
// layout of the backend), so a key names one exact prefix of one exact
// model and two prompts share block i only if they share every token
// before its end. The value of a block is the backend's exact KV bytes of
// its positions (backend.KVCache.ReadKV).
//
// There are two tiers. The hot tier holds blocks in RAM under a byte cap,
// least recently used evicted first. The SSD tier holds one file per block
// under a directory, under its own byte cap and LRU order; blocks are
// written behind the request by one writer goroutine fed by a bounded
// queue (a full queue drops the block and counts it), atomically
// (temporary file, fsync, rename), with a header carrying a magic, a
// version, the key, the model identity, the length and CRC-32C checksums.
// The directory is the index: it is scanned on Open (headers checked,
// modification time as the LRU order), so blocks survive restarts. A block
// whose header or checksum is wrong is removed, counted and reported as a
// miss, so the caller recomputes it; blocks read from the SSD are promoted
// to RAM.
package prefixcache
