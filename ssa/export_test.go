package ssa

// FullComparisons is how many comparisons m made in full (not from memory).
func FullComparisons(m *Comparisons) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.full
}
