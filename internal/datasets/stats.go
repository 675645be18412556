package datasets

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"

	"github.com/parquet-go/parquet-go"
	"github.com/parquet-go/parquet-go/encoding/thrift"
	"github.com/parquet-go/parquet-go/format"
)

// Statistics of text columns. parquet-go stores every page's whole min and
// max value in the page's header, and every column chunk's whole min and
// max in the footer: for columns of prompts and observations that is
// kilobytes per page and per row group, more than the compressed text
// (an 85 KB steps file held 37 KB of page headers and a 21 KB footer). No
// reader here uses them, and query engines that skip pages read the
// column index, whose bounds parquet-go truncates to 16 bytes. So a part
// file's BYTE_ARRAY (string) columns are written with:
//
//   - no statistics in page headers;
//   - a column chunk's min and max in the footer only when both fit in
//     maxStatBytes: ids, enums and snapshot references keep theirs, prose
//     loses them (its null count stays);
//   - the column index as parquet-go writes it.
//
// The footer is trimmed after parquet-go writes it (footerTrimmer):
// parquet-go's own switch (SkipPageBounds) drops the chunk bounds only
// together with the column index's, leaving an index whose every page
// claims to hold only "", which an engine would use to skip pages that
// match. Files written before keep their statistics; readers ignore them.

// maxStatBytes is the longest min or max value of a string column kept in
// a footer's column statistics.
const maxStatBytes = 128

// textColumnOptions turns page statistics off for every BYTE_ARRAY column
// of schema.
func textColumnOptions(schema *parquet.Schema) []parquet.WriterOption {
	var opts []parquet.WriterOption
	for _, path := range schema.Columns() {
		if leaf, ok := schema.Lookup(path...); ok && leaf.Node.Type().Kind() == parquet.ByteArray {
			opts = append(opts, parquet.SkipPageStatistics(path...))
		}
	}
	return opts
}

// footerTrimmer passes a Parquet file through to w, except what the
// writer emits once closing is set (the page index and the footer): that
// is held back until finish, which trims the footer's statistics and
// writes it all.
type footerTrimmer struct {
	w       io.Writer
	closing bool
	tail    bytes.Buffer
}

func (f *footerTrimmer) Write(p []byte) (int, error) {
	if f.closing {
		return f.tail.Write(p)
	}
	return f.w.Write(p)
}

// finish writes the held-back tail with the footer's long string
// statistics removed.
func (f *footerTrimmer) finish() error {
	b := f.tail.Bytes()
	if len(b) < 8 || string(b[len(b)-4:]) != "PAR1" {
		return fmt.Errorf("parquet writer closed without a footer (%d bytes at close)", len(b))
	}
	n := int(binary.LittleEndian.Uint32(b[len(b)-8:]))
	start := len(b) - 8 - n
	if start < 0 {
		return fmt.Errorf("parquet footer of %d bytes, but only %d bytes were written at close", n, len(b)-8)
	}
	var md format.FileMetaData
	if err := thrift.Unmarshal(new(thrift.CompactProtocol), b[start:len(b)-8], &md); err != nil {
		return fmt.Errorf("parquet footer: %w", err)
	}
	trimStatistics(&md)
	footer, err := thrift.Marshal(new(thrift.CompactProtocol), &md)
	if err != nil {
		return fmt.Errorf("parquet footer: %w", err)
	}
	out := make([]byte, 0, start+len(footer)+8)
	out = append(out, b[:start]...)
	out = append(out, footer...)
	out = binary.LittleEndian.AppendUint32(out, uint32(len(footer)))
	out = append(out, "PAR1"...)
	_, err = f.w.Write(out)
	return err
}

// trimStatistics drops the min and max of every string column chunk whose
// bounds do not both fit in maxStatBytes.
func trimStatistics(md *format.FileMetaData) {
	for i := range md.RowGroups {
		for j := range md.RowGroups[i].Columns {
			m := &md.RowGroups[i].Columns[j].MetaData
			s := &m.Statistics
			if m.Type != format.ByteArray || max(len(s.MinValue), len(s.MaxValue), len(s.Min), len(s.Max)) <= maxStatBytes {
				continue
			}
			s.MinValue, s.MaxValue, s.Min, s.Max = nil, nil, nil, nil
		}
	}
}
