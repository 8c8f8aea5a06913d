// Package openclaw serves the OpenClaw agent protocol: multi-turn agent
// sessions with tools, steering and an event stream, over a SessionStore
// (MemStore on a single node, the Raft state in a cluster). Turns run
// through the router's engine.Generator as chat requests built from the
// session's system prompt, tools and history; errors answer in the OpenAI
// shape. DESIGN.md records the choices.
package openclaw
