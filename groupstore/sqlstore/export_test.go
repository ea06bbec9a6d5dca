package sqlstore

// QueuedAdds is the number of Adds of s waiting for a group commit.
func QueuedAdds(s *Store) int {
	if s.batch == nil {
		return 0
	}
	s.batch.mu.Lock()
	defer s.batch.mu.Unlock()
	return len(s.batch.queue)
}
