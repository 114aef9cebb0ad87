package mapping

import (
	"testing"
)

// FuzzParseMapping: any file text is either refused or gives a mapping whose routing never panics.
func FuzzParseMapping(f *testing.F) {
	f.Add("route.topic.regex=(?<a>x)(y)?\nroute.topic.replacement=$2${a}$1\\\\$\n", "xy")
	f.Add("transforms.outbox.table.fields.additional.placement=a:header, b:envelope:c\n", "")
	f.Add("route.topic.regex=\\\\\nroute.topic.replacement=$0", "\\")
	f.Fuzz(func(t *testing.T, text, value string) {
		m, err := ParseMapping(text)
		if err != nil {
			return
		}
		_ = m.route.key(value)
		_ = m.Columns()
	})
}
