package tasks

import (
	"context"
	"fmt"
	"os"

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
		files, err := blobs.ReadDir(d.dir)
		if err != nil {
			return "", "", &Error{Task: t.ID, File: relTo(t.Dir, d.dir), Msg: err.Error()}
		}
		if *d.ref, err = blobs.PutTree(ctx, st, files, nil); err != nil {
			return "", "", fmt.Errorf("task %s: upload %s: %w", t.ID, relTo(t.Dir, d.dir), err)
		}
	}
	return workspace, private, nil
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
