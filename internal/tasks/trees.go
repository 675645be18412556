package tasks

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/mlerl/mlerl/internal/blobs"
	"github.com/mlerl/mlerl/internal/store"
)

// UploadTrees stores the task's workspace/ and private/ folders as two
// content-addressed trees in st's blob store and returns their references.
// Identical files (across tasks, or re-ingests) are stored once.
func UploadTrees(ctx context.Context, st store.Store, t *Task) (workspace, private string, err error) {
	for _, d := range []struct {
		dir string
		ref *string
	}{{t.WorkspacePath(), &workspace}, {t.PrivatePath(), &private}} {
		files, err := ReadTree(d.dir)
		if err != nil {
			return "", "", &Error{Task: t.ID, File: relTo(t.Dir, d.dir), Msg: err.Error()}
		}
		if d.ref == &private && t.Parts != nil {
			// The hidden answers' parts, computed when the folder has none.
			files[PartsFile] = blobs.File{Data: t.Parts, Mode: 0o644}
		}
		if *d.ref, err = blobs.PutTree(ctx, st, files, nil); err != nil {
			return "", "", fmt.Errorf("task %s: upload %s: %w", t.ID, relTo(t.Dir, d.dir), err)
		}
	}
	return workspace, private, nil
}

// ReadTree loads a task's workspace/ or private/ folder as files, leaving
// out what running the task leaves behind (submission.csv at the top,
// __pycache__ folders, *.pyc): a workspace starts without a submission.
func ReadTree(dir string) (blobs.Files, error) {
	files, err := blobs.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	for p := range files {
		if p == SubmissionFile || strings.HasSuffix(p, ".pyc") || strings.HasPrefix(p, "__pycache__/") || strings.Contains(p, "/__pycache__/") {
			delete(files, p)
		}
	}
	return files, nil
}

// Materialize writes the tree ref from st's blob store into dir, which is
// created if needed and should be empty (a workspace for one run, or a
// private folder for a grader).
func Materialize(ctx context.Context, st store.Store, ref, dir string) error {
	files, _, err := blobs.GetTree(ctx, st, ref)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return blobs.WriteDir(dir, files)
}
