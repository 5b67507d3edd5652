package main

import (
	"os"
	"runtime"

	"github.com/khw-dev/khw/internal/config"
	"github.com/khw-dev/khw/internal/state"
)

// hostArch maps the jumpbox's GOARCH to a node architecture; nodes run the
// host's architecture by default (KVM cannot run another one at full speed).
func hostArch() string {
	if runtime.GOARCH == "amd64" {
		return config.ArchAMD64
	}
	return config.ArchARM64
}

// defaultClusterName is $KHW_CLUSTER or "khw".
func defaultClusterName() string {
	if n := os.Getenv(state.EnvCluster); n != "" {
		return n
	}
	return config.DefaultName
}
