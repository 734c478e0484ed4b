package wire

import (
	"fmt"
	"strings"
	"testing"
)

// The declaration size: 11,000 resources, about 1 MB. The strict key pre-pass costs about
// a third on top of encoding/json.
func BenchmarkParseDeclarationOfElevenThousandResources(b *testing.B) {
	res := make([]string, 11000)
	for i := range res {
		res[i] = fmt.Sprintf(`{"type":"file","id":"/srv/app/data/file-%05d.conf","spec":{"content":"x","mode":"0644"}}`, i)
	}
	doc := []byte(`{"version":1,"node":"n1","resources":[` + strings.Join(res, ",") + `]}`)
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := ParseDeclaration(doc, "n1"); err != nil {
			b.Fatal(err)
		}
	}
}
