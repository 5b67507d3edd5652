package main

import (
	"embed"
	"strings"

	"github.com/khw-dev/khw/internal/lab"
	"github.com/khw-dev/khw/internal/lab/labid"
)

// helpFiles are the long help texts and examples of the commands, one file
// per text (NAME.txt, NAME.example.txt), kept as text so that they read as
// they print and a translation can sit beside them.
//
//go:embed help/*.txt
var helpFiles embed.FS

// help returns help/NAME.txt with its placeholders filled from the
// catalogue, so that a lab ID is written once (package labid): {etcd} and
// {smoke} are lab 04's and 11's IDs, {labs} the table of labs, {steps}
// khw up's step list, {detectors} the list of lab check's detectors. A
// missing file panics: every command's help is read when the command tree
// is built, so any test that builds it finds the mistake.
func help(name string) string {
	b, err := helpFiles.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic("khw: no help text " + name + ": " + err.Error())
	}
	return helpVars.Replace(strings.TrimSuffix(string(b), "\n"))
}

var helpVars = strings.NewReplacer(
	"{etcd}", labid.Etcd,
	"{smoke}", labid.Smoke,
	"{labs}", lab.IDTable(5),
	"{steps}", lab.UpHelp(),
	"{detectors}", lab.DetectorHelp(),
)
