package text

// Plural is one when n is 1, else many: "1 failure", "2 failures".
func Plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
