package trust

import "testing"

// LegacyStoreForTest makes a store in data signed as before decision 0022 and returns its nodes
// signing key, for the tests of package trust_test.
func LegacyStoreForTest(t *testing.T, data string) string { return legacyStore(t, data) }
