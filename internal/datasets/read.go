package datasets

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/apache/arrow/go/v17/arrow"
	"github.com/apache/arrow/go/v17/arrow/memory"
	"github.com/apache/arrow/go/v17/parquet/file"
	"github.com/apache/arrow/go/v17/parquet/pqarrow"
	"github.com/parquet-go/parquet-go"

	"github.com/mlerl/mlerl/internal/store"
	"github.com/mlerl/mlerl/schemas"
)

// ErrCorrupt is wrapped when a file does not match its manifest or is not
// readable Parquet.
var ErrCorrupt = errors.New("corrupt dataset file")

// openParquet opens a Parquet object and checks its schema metadata.
func openParquet(uri string, o store.Object, schema schemas.Info) (*parquet.File, error) {
	pf, err := parquet.OpenFile(o, o.Size())
	if err != nil {
		return nil, fmt.Errorf("%s: not a readable Parquet file (%v): %w; re-run the stage that wrote it", uri, err, ErrCorrupt)
	}
	name, _ := pf.Lookup(schemas.MetaSchema)
	version, _ := pf.Lookup(schemas.MetaVersion)
	if err := schema.Check(name, version); err != nil {
		return nil, fmt.Errorf("%s: %w", uri, err)
	}
	return pf, nil
}

// CheckSchema fails unless m was written with a readable version of schema.
func CheckSchema(m *Manifest, schema schemas.Info) error {
	if err := schema.Check(m.Schema, m.SchemaVersion); err != nil {
		return fmt.Errorf("%s: %w", m.URI, err)
	}
	return nil
}

// Each streams the rows of every file of m, in manifest order, to fn in
// batches. It checks each file's schema metadata first.
func Each[T any](ctx context.Context, st store.Store, m *Manifest, schema schemas.Info, fn func([]T) error) error {
	if err := CheckSchema(m, schema); err != nil {
		return err
	}
	buf := make([]T, 1024)
	for _, f := range m.Files {
		key := Dir(m.Name, m.Version) + "/" + f.Path
		if err := eachInFile(ctx, st, key, schema, buf, fn); err != nil {
			return err
		}
	}
	return nil
}

func eachInFile[T any](ctx context.Context, st store.Store, key string, schema schemas.Info, buf []T, fn func([]T) error) error {
	o, err := st.Open(ctx, key)
	if err != nil {
		return err
	}
	defer o.Close()
	pf, err := openParquet(st.URI(key), o, schema)
	if err != nil {
		return err
	}
	r := parquet.NewGenericReader[T](pf)
	defer r.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		clear(buf)
		n, err := r.Read(buf)
		if n > 0 {
			if ferr := fn(buf[:n]); ferr != nil {
				return ferr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%s: %v: %w", st.URI(key), err, ErrCorrupt)
		}
	}
}

// ReadAll reads every row of m.
func ReadAll[T any](ctx context.Context, st store.Store, m *Manifest, schema schemas.Info) ([]T, error) {
	out := make([]T, 0, m.Rows)
	err := Each(ctx, st, m, schema, func(rows []T) error {
		out = append(out, rows...)
		return nil
	})
	return out, err
}

// ReadPart reads every row of one part file of a pending version, for a
// resumed stage that must know what it already wrote.
func ReadPart[T any](ctx context.Context, p *Pending, part string) ([]T, error) {
	var out []T
	err := eachInFile(ctx, p.St, p.Dir()+"/"+part, p.Schema, make([]T, 1024), func(rows []T) error {
		out = append(out, rows...)
		return nil
	})
	return out, err
}

// ReadPending reads every row of every finished part of a pending
// version, in part-name order: what a resumed or sharded stage has
// written so far.
func ReadPending[T any](ctx context.Context, p *Pending) ([]T, error) {
	parts, err := p.Parts(ctx)
	if err != nil {
		return nil, err
	}
	var out []T
	for _, part := range parts {
		rows, err := ReadPart[T](ctx, p, part)
		if err != nil {
			return nil, err
		}
		out = append(out, rows...)
	}
	return out, nil
}

// EachRecord streams the files of m as Arrow record batches (columnar), for
// stages that want columns (the trainer). Records are released after fn
// returns; fn must Retain what it keeps.
func EachRecord(ctx context.Context, st store.Store, m *Manifest, schema schemas.Info, mem memory.Allocator, fn func(arrow.Record) error) error {
	if err := CheckSchema(m, schema); err != nil {
		return err
	}
	if mem == nil {
		mem = memory.DefaultAllocator
	}
	for _, f := range m.Files {
		key := Dir(m.Name, m.Version) + "/" + f.Path
		if err := eachRecordInFile(ctx, st, key, schema, mem, fn); err != nil {
			return err
		}
	}
	return nil
}

func eachRecordInFile(ctx context.Context, st store.Store, key string, schema schemas.Info, mem memory.Allocator, fn func(arrow.Record) error) error {
	o, err := st.Open(ctx, key)
	if err != nil {
		return err
	}
	defer o.Close()
	pr, err := file.NewParquetReader(io.NewSectionReader(o, 0, o.Size()))
	if err != nil {
		return fmt.Errorf("%s: not a readable Parquet file (%v): %w; re-run the stage that wrote it", st.URI(key), err, ErrCorrupt)
	}
	defer pr.Close()
	kv := pr.MetaData().KeyValueMetadata()
	name, version := "", ""
	if v := kv.FindValue(schemas.MetaSchema); v != nil {
		name = *v
	}
	if v := kv.FindValue(schemas.MetaVersion); v != nil {
		version = *v
	}
	if err := schema.Check(name, version); err != nil {
		return fmt.Errorf("%s: %w", st.URI(key), err)
	}
	fr, err := pqarrow.NewFileReader(pr, pqarrow.ArrowReadProperties{BatchSize: 4096}, mem)
	if err != nil {
		return fmt.Errorf("%s: %v: %w", st.URI(key), err, ErrCorrupt)
	}
	rr, err := fr.GetRecordReader(ctx, nil, nil)
	if err != nil {
		return fmt.Errorf("%s: %v: %w", st.URI(key), err, ErrCorrupt)
	}
	defer rr.Release()
	for rr.Next() {
		if err := fn(rr.Record()); err != nil {
			return err
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: %v: %w", st.URI(key), err, ErrCorrupt)
	}
	return nil
}

// Verify re-reads every file of m and checks its size, sha256 and Parquet
// footer. It returns nil or an error naming every bad file.
func Verify(ctx context.Context, st store.Store, m *Manifest) error {
	schema, ok := schemas.ByName(m.Schema)
	if !ok {
		return fmt.Errorf("%s: unknown schema %q: %w", m.URI, m.Schema, schemas.ErrVersion)
	}
	var errs []error
	var rows, bytes int64
	for _, f := range m.Files {
		rows += f.Rows
		bytes += f.Bytes
		key := Dir(m.Name, m.Version) + "/" + f.Path
		got, err := checkFile(ctx, st, key, schema, &f)
		switch {
		case errors.Is(err, store.ErrNotFound):
			errs = append(errs, fmt.Errorf("%s: listed in the manifest but missing: %w", st.URI(key), ErrCorrupt))
		case err != nil:
			errs = append(errs, err)
		case got.Rows != f.Rows:
			errs = append(errs, fmt.Errorf("%s: %d rows, manifest says %d: %w", st.URI(key), got.Rows, f.Rows, ErrCorrupt))
		}
	}
	if rows != m.Rows || bytes != m.Bytes {
		errs = append(errs, fmt.Errorf("%s: totals say %d rows, %d bytes; its files add up to %d rows, %d bytes: %w", m.URI, m.Rows, m.Bytes, rows, bytes, ErrCorrupt))
	}
	return errors.Join(errs...)
}
