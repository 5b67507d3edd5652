package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/khw-dev/khw/internal/encryption"
)

// encryptionRun wraps one operation on the cluster's encryption config: it
// takes the cluster lock, runs op on the file and prints the result.
func encryptionRun(a *app, op func(path string) (*encryption.Result, error)) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		d, _, unlock, err := a.loadForWrite()
		if err != nil {
			return err
		}
		defer unlock()
		res, err := op(d.EncryptionConfigPath())
		if err != nil {
			return invalidIfValidation(err)
		}
		fmt.Fprintln(a.out, res.String())
		return nil
	}
}

func newEncryptionCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "encryption",
		Short: "Create or check the encryption-at-rest config for Secrets",
		Long:  help("encryption"),
		Args:  exactArgs(0),
		RunE:  encryptionRun(a, func(p string) (*encryption.Result, error) { return encryption.Reconcile(p, nil) }),
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "rotate",
		Short: "Add a new key first; keep the old ones to read existing Secrets",
		Args:  exactArgs(0),
		RunE:  encryptionRun(a, func(p string) (*encryption.Result, error) { return encryption.Rotate(p, nil) }),
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "prune",
		Short: "Drop every key but the first (after all Secrets were rewritten)",
		Args:  exactArgs(0),
		RunE:  encryptionRun(a, encryption.Prune),
	})
	return cmd
}

// invalidIfValidation maps an encryption-config validation failure to exit 3.
func invalidIfValidation(err error) error {
	var ve *encryption.ValidationError
	if errors.As(err, &ve) {
		return invalidInputError{err}
	}
	return err
}
