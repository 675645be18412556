package train

import (
	"fmt"

	"github.com/gomlx/gomlx/core/tensors"
)

// Small conversions between Go slices and GoMLX tensors.

func i32Tensor(data []int32, dims ...int) *tensors.Tensor {
	return tensors.FromFlatDataAndDimensions(data, dims...)
}

func f32Tensor(data []float32, dims ...int) *tensors.Tensor {
	return tensors.FromFlatDataAndDimensions(data, dims...)
}

// flat copies a float32 tensor to a Go slice.
func flat(t *tensors.Tensor) ([]float32, error) {
	out, err := tensors.CopyFlatData[float32](t)
	if err != nil {
		return nil, fmt.Errorf("model: reading output %s: %w", t.Shape(), err)
	}
	return out, nil
}

// scalar reads a float32 scalar tensor.
func scalar(t *tensors.Tensor) (float64, error) {
	v, err := flat(t)
	if err != nil {
		return 0, err
	}
	if len(v) != 1 {
		return 0, fmt.Errorf("model: output %s is not a scalar", t.Shape())
	}
	return float64(v[0]), nil
}

type tensorsT = tensors.Tensor
