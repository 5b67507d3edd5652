package config

import (
	"strings"
	"testing"
)

func TestLibvirtSectionParsesAndRoundTrips(t *testing.T) {
	doc := `
apiVersion: khw.dev/v1alpha1
kind: Cluster
name: lv
arch: amd64
provider: libvirt
libvirt:
  uri: qemu:///system
  image: /var/lib/khw/disk.qcow2
  kernel: /var/lib/khw/vmlinuz
  initrd: /var/lib/khw/initrd.img
  cmdline: root=/dev/vda rw console=ttyS0
  network: default
  domainType: qemu
nodes:
  - {name: lb, role: loadbalancer, ip: 192.168.122.10}
  - {name: cp1, role: controlplane, ip: 192.168.122.11}
  - {name: w1, role: worker, ip: 192.168.122.21, podCIDR: 10.200.0.0/24}
`
	c, warns, err := Parse([]byte(doc), "lv.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(warns) != 0 {
		t.Errorf("warnings: %v", warns)
	}
	want := Libvirt{URI: "qemu:///system", Image: "/var/lib/khw/disk.qcow2", Kernel: "/var/lib/khw/vmlinuz", Initrd: "/var/lib/khw/initrd.img",
		Cmdline: "root=/dev/vda rw console=ttyS0", Network: "default", DomainType: DomainTypeQEMU}
	if c.Libvirt == nil || *c.Libvirt != want {
		t.Fatalf("libvirt = %+v, want %+v", c.Libvirt, want)
	}
	data, err := c.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	back, _, err := Parse(data, "again.yaml")
	if err != nil || back.Libvirt == nil || *back.Libvirt != want {
		t.Fatalf("round trip: %+v %v\n%s", back.Libvirt, err, data)
	}
	// A cluster without the section writes none, only the commented
	// example (TestMarshalLibvirtExample).
	plain, _ := Default("lv", ArchAMD64, ProviderLibvirt).Marshal()
	if strings.Contains(string(plain), "\nlibvirt:") {
		t.Errorf("default cluster.yaml has a libvirt section:\n%s", plain)
	}
}

func TestLibvirtSectionValidation(t *testing.T) {
	cases := []struct {
		name  string
		l     Libvirt
		field string
		words string
	}{
		{"domain type", Libvirt{DomainType: "hvf"}, "libvirt.domainType", "use one of: kvm, qemu"},
		{"uri", Libvirt{URI: "xen:///system"}, "libvirt.uri", "qemu:///system"},
		{"relative image", Libvirt{Image: "disk.qcow2"}, "libvirt.image", "absolute path"},
		{"kernel without image", Libvirt{Kernel: "/k"}, "libvirt.kernel", "without libvirt.image"},
		{"initrd without kernel", Libvirt{Image: "/i", Initrd: "/r"}, "libvirt.initrd", "without libvirt.kernel"},
		{"cmdline without kernel", Libvirt{Image: "/i", Cmdline: "x"}, "libvirt.cmdline", "without libvirt.kernel"},
		{"network name", Libvirt{Network: "a/b"}, "libvirt.network", "not a libvirt network name"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Default("lv", ArchAMD64, ProviderLibvirt)
			l := tc.l
			c.Libvirt = &l
			_, err := c.Validate()
			ve, ok := err.(*ValidationError)
			if !ok || len(ve.Errors) != 1 {
				t.Fatalf("want one field error, got %v", err)
			}
			fe := ve.Errors[0]
			if fe.Field != tc.field || !strings.Contains(fe.Error(), tc.words) {
				t.Errorf("error %q: want field %s mentioning %q", fe.Error(), tc.field, tc.words)
			}
		})
	}
	c := Default("lv", ArchAMD64, ProviderNspawn)
	c.Libvirt = &Libvirt{DomainType: DomainTypeKVM}
	warns, err := c.Validate()
	if err != nil || len(warns) != 1 || warns[0].Field != "libvirt" {
		t.Errorf("nspawn with a libvirt section: warns %v err %v", warns, err)
	}
}
