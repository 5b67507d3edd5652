// Package labs holds the texts of the classroom labs (`khw lab`), one
// Markdown file per step of `khw up`, embedded into the binary:
//
//	01-machines.md … 11-smoke.md   one per bring-up step, named after its ID
//	12-failover.md                 the failover drills (khw break / khw heal)
//
//	ko/glossary.md                 the field's terms, English | 한국어 | meaning
//
// Every lab file has the same shape, which package internal/labs parses and
// checks: a level-1 title "# NN · Title", a one-paragraph summary, then the
// level-2 sections "Why this step exists", "What khw does", "Observe",
// "Common mistakes" and "Upstream", in that order. The ```sh blocks of
// "Observe" are run by `khw lab` inside `khw shell`, so they must only read.
package labs

import "embed"

// FS holds every *.md file of this directory and of ko/.
//
//go:embed *.md ko/*.md
var FS embed.FS
