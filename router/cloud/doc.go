// Package cloud sends chat requests to upstream providers — OpenAI- and
// Anthropic-compatible APIs — for backend_override "cloud" and for a
// model's cloud_fallback. It works at the neutral level: an
// engine.Request goes out in the upstream's wire format (always its
// streaming API) and its server-sent events come back as engine.Events,
// so every dialect of the frontend (OpenAI, Anthropic, OpenClaw) talks
// to every kind of upstream, and metrics and key usage count the answer
// as they count a local one.
//
// The configuration (Config) holds no secret: an upstream names the
// environment variable or the file its API key is read from, on the node
// that makes the call, at each call. Keys are never logged, never put in
// an error, and redacted from a provider's messages that echo them.
package cloud
