package config

import (
	"testing"
)

// FuzzParse feeds arbitrary bytes to the cluster.yaml parser: it must never
// panic, and whatever it accepts must validate, marshal and parse back to the
// same document.
func FuzzParse(f *testing.F) {
	base, err := Default("khw", ArchARM64, ProviderNspawn).Marshal()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(base)
	f.Add([]byte("name: x\nnodes: []\n"))
	f.Add([]byte("nodes:\n  - {name: w1, role: worker, ip: 10.0.0.1, podCIDR: 10.0.0.0/33}\n"))
	f.Add([]byte("kubernetes: {serviceCIDR: 10.32.0.0/31, clusterDNS: '::1'}\n"))
	f.Add([]byte("pki: {certValidity: -5h, renewBefore: 1000000h}\n"))
	f.Add([]byte("network: {cidr: 0.0.0.0/0}\n"))
	// Once panics: a document with a tag but no "!!" (the error text was cut
	// at the "!!"), and a reserved node name without a role (the fix took
	// the role's first letter).
	f.Add([]byte("\n\n!00"))
	f.Add([]byte("nodes:\n  - {name: admin, ip: 192.168.122.21}\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		c, _, err := Parse(data, "fuzz.yaml")
		if err != nil {
			if err.Error() == "" {
				t.Fatal("empty error message")
			}
			return
		}
		if _, err := c.Validate(); err != nil {
			t.Fatalf("accepted document does not validate: %v", err)
		}
		out, err := c.Marshal()
		if err != nil {
			t.Fatalf("marshal accepted document: %v", err)
		}
		c2, _, err := Parse(out, "again.yaml")
		if err != nil {
			t.Fatalf("re-parse of marshaled document failed: %v\n%s", err, out)
		}
		out2, err := c2.Marshal()
		if err != nil || string(out2) != string(out) {
			t.Fatalf("not stable across a round trip:\n%s\n---\n%s", out, out2)
		}
	})
}
