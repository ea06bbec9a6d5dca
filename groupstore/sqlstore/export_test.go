package sqlstore

// QueuedAdds is the number of Adds of s waiting for a group commit.
func QueuedAdds(s *Store) int {
	if s.batch == nil {
		return 0
	}
	return s.batch.b.Waiting()
}
