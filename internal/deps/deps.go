// Package deps pins the module's direct dependencies while the stages are being written.
package deps

import (
	_ "cloud.google.com/go/storage"
	_ "github.com/apache/arrow/go/v17/parquet/pqarrow"
	_ "github.com/dlclark/regexp2"
	_ "github.com/fsouza/fake-gcs-server/fakestorage"
	_ "github.com/gomlx/compute/gobackend"
	_ "github.com/gomlx/gomlx/ml/zoo/transformer"
	_ "github.com/parquet-go/parquet-go"
	_ "github.com/spf13/cobra"
	_ "github.com/yalue/onnxruntime_go"
	_ "golang.org/x/sync/errgroup"
	_ "gonum.org/v1/plot"
	_ "gopkg.in/yaml.v3"
)
