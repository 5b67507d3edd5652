// Package labs holds the texts of the classroom labs (`khw lab`), one
// Markdown file per step of `khw up`, embedded into the binary:
//
//	01-machines.md … 11-smoke.md   one per bring-up step, named after its ID
//	12-failover.md                 the failover drills (khw break / khw heal)
//
//	ko/NN-name.md                  the same labs in Korean (khw lab --lang ko)
//	ko/glossary.md                 the field's terms, English | 한국어 | meaning
//	challenges/NN-name.md          the troubleshooting challenges of lab NN
//	ko/challenges/NN-name.md       the same in Korean (khw challenge --lang ko)
//
// Every lab file has the same shape, which package internal/labtext parses and
// checks: a level-1 title "# NN · Title", a one-paragraph summary, then the
// level-2 sections "Objectives" (three, each with its CKA/CKS domain, and
// the time it takes), "You should have", "Why this step exists", "What khw
// does", "Observe" (each command with its expected output), "Security",
// "Common mistakes", "Predict, then observe", "Quiz" and "Upstream", in
// that order (in Korean: 목표 … 업스트림 문서). The ```sh blocks of "You
// should have" and "Observe" are run by `khw lab` inside `khw shell`, so
// they must only read.
package labs

import "embed"

// FS holds every *.md file of this directory, of ko/ and of their
// challenges/.
//
//go:embed *.md ko/*.md challenges/*.md ko/challenges/*.md
var FS embed.FS
