// Package node is the composition root: it builds a node from its
// configuration, starts its parts in order and stops them in reverse.
package node
