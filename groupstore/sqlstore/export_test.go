package sqlstore

// QueuedAdds is the number of Adds of s waiting for a group commit.
func QueuedAdds(s *Store) int {
	if s.batch == nil {
		return 0
	}
	return s.batch.b.Waiting()
}

// GatedAdds is the number of Adds of s waiting for a Locked call of s on
// their group to end.
func GatedAdds(s *Store) int {
	s.gate.mu.Lock()
	defer s.gate.mu.Unlock()
	return s.gate.waiting
}
