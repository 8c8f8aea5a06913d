package backend

import "fmt"

// RNNOps are the ops of small recurrent audio models (Silero VAD: an STFT
// front end, a convolutional encoder and an LSTM decoder) that the rest
// of the op set does not cover.
type RNNOps interface {
	// LSTMCell is one step of an LSTM cell. gates [rows, 4H] holds the
	// pre-activations x·Wᵀ + h·Rᵀ + b in PyTorch's (and mlx nn.LSTM's)
	// order i, f, g, o; c [rows, H] is the cell state. With
	// c' = σ(f)·c + σ(i)·tanh(g) and h' = σ(o)·tanh(c'), it returns
	// [rows, 2H] = [h' | c'] (split with HeadSlice(…, 1, …)).
	LSTMCell(gates, c Array) Array
	// Sigmoid returns 1/(1+e^−x) elementwise.
	Sigmoid(x Array) Array
	// ComplexAbs returns the modulus of complex numbers stored as real
	// parts in columns [0, n) and imaginary parts in [n, 2n) of x
	// [rows, 2n]: √(re² + im²), [rows, n] (an STFT's magnitude when the
	// transform is a convolution with cosine and sine rows).
	ComplexAbs(x Array) Array
}

// LSTMShape checks the arguments of LSTMCell and returns the hidden
// width H.
func LSTMShape(gates, c Array) (hidden int, err error) {
	if c.Cols() <= 0 || gates.Cols() != 4*c.Cols() || gates.Rows() != c.Rows() {
		return 0, fmt.Errorf("LSTMCell: gates [%d, %d], c [%d, %d]", gates.Rows(), gates.Cols(), c.Rows(), c.Cols())
	}
	return c.Cols(), nil
}

// ComplexAbsShape checks the argument of ComplexAbs and returns n.
func ComplexAbsShape(x Array) (n int, err error) {
	if x.Cols() == 0 || x.Cols()%2 != 0 {
		return 0, fmt.Errorf("ComplexAbs: x [%d, %d] has no even width", x.Rows(), x.Cols())
	}
	return x.Cols() / 2, nil
}
