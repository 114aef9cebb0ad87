package pgserver

import "testing"

// TestPublicationNamesOptionQuotesTheName pins the START_REPLICATION option: pgoutput reads its value as an
// identifier list, so an unquoted MyPub would be folded to mypub and a comma would split the name.
func TestPublicationNamesOptionQuotesTheName(t *testing.T) {
	for name, want := range map[string]string{
		"cdc_router_outbox": `publication_names '"cdc_router_outbox"'`,
		"MyPub":             `publication_names '"MyPub"'`,
		`a"b`:               `publication_names '"a""b"'`,
		"a,b":               `publication_names '"a,b"'`,
		"it's":              `publication_names '"it''s"'`,
	} {
		if got := publicationNamesOption(name); got != want {
			t.Errorf("publicationNamesOption(%q) = %s, want %s", name, got, want)
		}
	}
}
