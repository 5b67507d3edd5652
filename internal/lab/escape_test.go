package lab

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/khw-dev/khw/internal/lab/grade"
	"github.com/khw-dev/khw/internal/lab/labid"
	"github.com/khw-dev/khw/internal/steps"
)

// nodeText is text a node controls (a unit name, a file, an error): ESC
// [2J clears the terminal, the carriage return overwrites the line.
const nodeText = "x\x1b[2J\ry"

// nodeTextShown is nodeText as the terminal must get it.
const nodeTextShown = `x\x1b[2J\x0dy`

// assertEscaped checks that out holds nodeText n times, each escaped,
// and no raw ESC or carriage return.
func assertEscaped(t *testing.T, out string, n int) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\r") {
		t.Errorf("control characters reach the terminal:\n%q", out)
	}
	if got := strings.Count(out, nodeTextShown); got != n {
		t.Errorf("%d escaped copies of the node's text, want %d:\n%q", got, n, out)
	}
}

// khw lab check of an Operation lab prints each finding's What, Why,
// Evidence and Fix with the node's control characters escaped.
func TestCheckOperationEscapesNodeText(t *testing.T) {
	co, _ := testCourse(t)
	var begins []bool
	mistakes := []grade.Finding{{Lab: labid.EtcdBackup, Node: "cp1", What: nodeText, Why: nodeText, Evidence: nodeText, Fix: nodeText}}
	l := fakeOperation(t, &begins, &mistakes)
	var out bytes.Buffer
	if err := co.Check(context.Background(), l, UI{Out: &out, Err: &out}); err == nil {
		t.Fatal("a lab with a mistake passed")
	}
	assertEscaped(t, out.String(), 4)
}

// khw lab check of a step lab prints the step's check error, warnings,
// mistakes, variants and differences with control characters escaped.
func TestGradeWriteEscapesNodeText(t *testing.T) {
	g := &Grade{
		Status:      LabStatus{Status: Unknown, Detail: nodeText},
		Warnings:    []string{nodeText},
		Mistakes:    []grade.Finding{{Lab: labid.Etcd, Node: "cp1", What: nodeText, Evidence: nodeText, Fix: nodeText}},
		Variants:    []grade.Finding{{Lab: labid.Etcd, Node: "cp1", What: nodeText, Why: nodeText, Kind: grade.Variant}},
		Differences: []steps.Diff{{Node: "cp1", What: nodeText, Fix: nodeText}},
	}
	var out bytes.Buffer
	g.write(&out, mustLab(t, labid.Etcd))
	assertEscaped(t, out.String(), 9)
}

// khw lab list's DETAIL (a difference read on a node) is escaped before
// the columns are measured.
func TestWriteListEscapesNodeText(t *testing.T) {
	var out bytes.Buffer
	if err := WriteList(&out, []LabStatus{{ID: labid.Etcd, Status: Drifted, Detail: "cp1: " + nodeText}}, false); err != nil {
		t.Fatal(err)
	}
	assertEscaped(t, out.String(), 1)
}
