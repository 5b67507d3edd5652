package labcheck

import (
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"
)

func SubjectsText(ss []rbacv1.Subject) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Kind+" "+s.Name)
	}
	if len(out) == 0 {
		return "(no subjects)"
	}
	return strings.Join(out, ", ")
}
