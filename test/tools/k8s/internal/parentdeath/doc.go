// Package parentdeath, imported for its side effect by each binary of this module, ties
// the process to its parent: on Linux it dies with it.
package parentdeath
