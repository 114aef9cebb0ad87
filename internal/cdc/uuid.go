package cdc

// IsUUID reports whether s is a uuid in its hyphenated text form, 8-4-4-4-12 hexadecimal digits of either
// case: the form PostgreSQL prints and every uuid library writes (PostgreSQL accepts more forms on input).
// An event id must have it.
func IsUUID[T ~string | ~[]byte](s T) bool {
	if len(s) != 36 {
		return false
	}
	for i := range len(s) {
		c := s[i]
		switch i {
		case 8, 13, 18, 23:
			if c != '-' {
				return false
			}
		default:
			if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F') {
				return false
			}
		}
	}
	return true
}
