package fault

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// PushKubeconfig installs on node, at path (mode 0600), the state
// directory's kubeconfigs/<name> changed by change, and restarts unit.
func PushKubeconfig(ctx context.Context, a Actions, node, name, path, unit string, change func(*clientcmdapi.Config)) error {
	data, err := os.ReadFile(filepath.Join(a.State().KubeconfigDir(), name))
	if err != nil {
		return err
	}
	k, err := clientcmd.Load(data)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	change(k)
	out, err := clientcmd.Write(*k)
	if err != nil {
		return err
	}
	if err := a.Push(ctx, node, path, out, 0o600); err != nil {
		return err
	}
	_, err = a.Run(ctx, node, "systemctl restart "+unit)
	return err
}
