package remote

// SameConnection reports whether two Planes' clients share one connection (one
// credential's transport, mapper and watches).
func SameConnection(a, b *Plane) bool { return a.conn == b.conn }
