package modelfile

import "errors"

// Errors a caller may branch on with errors.Is.
var (
	// ErrInvalidConfig: config.json or generation_config.json holds an
	// impossible or malformed value.
	ErrInvalidConfig = errors.New("invalid config")
	// ErrUnknownArchitecture: the architecture is not one we run.
	ErrUnknownArchitecture = errors.New("unknown architecture")
	// ErrUnsupported: a valid feature we do not implement (a quantization
	// method, a RoPE scaling type).
	ErrUnsupported = errors.New("unsupported")
	// ErrNoWeights: the directory has no safetensors weights.
	ErrNoWeights = errors.New("no weights")
	// ErrInvalidIndex: model.safetensors.index.json is malformed.
	ErrInvalidIndex = errors.New("invalid weight index")
	// ErrMissingShard: the index names a file that does not exist.
	ErrMissingShard = errors.New("missing shard")
	// ErrMissingTensor: a tensor the index or the model needs is absent.
	ErrMissingTensor = errors.New("missing tensor")
	// ErrDuplicateTensor: two weight files hold the same tensor name.
	ErrDuplicateTensor = errors.New("duplicate tensor")
	// ErrBadLinear: a linear layer's tensors have the wrong dtype or shape.
	ErrBadLinear = errors.New("invalid linear layer")
)
