package whisper

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Word is one word of a segment with its times, faster-whisper's Word.
type Word struct {
	Start, End  float64
	Word        string
	Probability float64
}

// faster-whisper's default punctuation sets, merged into the neighbouring
// word.
const (
	DefaultPrependPunctuations = "\"'“¿([{-"
	DefaultAppendPunctuations  = "\"'.。,，!！?？:：”)]}、"
)

// The time grid of alignment: faster-whisper divides by these integers
// (frames_per_second, tokens_per_second), not multiplies by 0.01.
const (
	framesPerSecond = 100
	tokensPerSecond = 50
	medianWidth     = 7
)

// timing is one word of an alignment (faster-whisper's find_alignment).
type timing struct {
	word        string
	tokens      []int
	start, end  float64
	probability float64
}

// addWordTimestamps is faster-whisper's add_word_timestamps for one
// window: the text tokens of all its segments aligned in one decoder
// pass, durations capped at sentence ends, punctuation merged, the words
// handed out to the segments (rounded to 0.01 s, offset by the window's
// start) and the segments' bounds moved to their words'. lastSpeech is
// the end of the speech before the window (the caller moves it to the
// window's last end, lastEnd).
func (m *Model) addWordTimestamps(ctx context.Context, w *Window, sot []int, segs []rawSegment, seek, numFrames int, o Options, lang string, lastSpeech float64) error {
	if len(segs) == 0 {
		return nil
	}
	var text []int
	perSeg := make([]int, len(segs))
	for i, s := range segs {
		for _, t := range s.tokens {
			if t < m.Tokens.EOT {
				text = append(text, t)
				perSeg[i]++
			}
		}
	}
	align, err := m.findAlignment(ctx, w, sot, text, numFrames, lang)
	if err != nil {
		return err
	}
	var durations []float64
	for _, a := range align {
		if d := a.end - a.start; d != 0 {
			durations = append(durations, d)
		}
	}
	median := 0.0
	if len(durations) > 0 {
		median = medianOf(durations)
	}
	median = min(0.7, median)
	maxDur := median * 2
	if len(durations) > 0 {
		const sentenceEnd = ".。!！?？"
		for i := 1; i < len(align); i++ {
			if align[i].end-align[i].start > maxDur {
				if strings.Contains(sentenceEnd, align[i].word) {
					align[i].end = align[i].start + maxDur
				} else if strings.Contains(sentenceEnd, align[i-1].word) {
					align[i].start = align[i].end - maxDur
				}
			}
		}
	}
	prepend, appendP := o.PrependPunctuations, o.AppendPunctuations
	mergePunctuations(align, prepend, appendP)

	offset := float64(seek) / framesPerSecond
	wi := 0
	for si := range segs {
		s := &segs[si]
		var words []Word
		for saved := 0; wi < len(align) && saved < perSeg[si]; wi++ {
			a := align[wi]
			if a.word != "" {
				words = append(words, Word{Word: a.word, Start: round2(offset + a.start), End: round2(offset + a.end), Probability: a.probability})
			}
			saved += len(a.tokens)
		}
		if len(words) > 0 {
			// The first word after a pause, and the second, no longer than
			// twice the median word.
			if words[0].End-lastSpeech > median*4 && (words[0].End-words[0].Start > maxDur ||
				(len(words) > 1 && words[1].End-words[0].Start > maxDur*2)) {
				if len(words) > 1 && words[1].End-words[1].Start > maxDur {
					boundary := max(words[1].End/2, words[1].End-maxDur)
					words[0].End, words[1].Start = boundary, boundary
				}
				words[0].Start = max(0, words[0].End-maxDur)
			}
			if s.start < words[0].End && s.start-0.5 > words[0].Start {
				words[0].Start = max(0, min(words[0].End-median, s.start))
			} else {
				s.start = words[0].Start
			}
			if s.end > words[len(words)-1].Start && s.end+0.5 < words[len(words)-1].End {
				words[len(words)-1].End = max(words[len(words)-1].Start+median, s.end)
			} else {
				s.end = words[len(words)-1].End
			}
			lastSpeech = s.end
		}
		s.words = words
	}
	return nil
}

// lastEnd is faster-whisper's get_end: the end of the last word of the
// segments, else the last segment's end (ok false without segments).
func lastEnd(segs []rawSegment) (float64, bool) {
	for i := len(segs) - 1; i >= 0; i-- {
		if n := len(segs[i].words); n > 0 {
			return segs[i].words[n-1].End, true
		}
	}
	if len(segs) == 0 {
		return 0, false
	}
	return segs[len(segs)-1].end, true
}

// findAlignment aligns text to the window as ctranslate2's Whisper.align
// and faster-whisper's find_alignment do: one decoder pass over sot +
// <|notimestamps|> + text + <|endoftext|>; each alignment head's
// cross-attention scores over the window's numFrames/2 positions,
// softmaxed, standardized across the tokens, median-filtered (width 7)
// along time and averaged over the heads; dynamic time warping of the
// text rows against time; and the words (split at spaces, or at unicode
// boundaries for languages without spaces) timed by the rows' first
// frames, each with its tokens' mean probability.
func (m *Model) findAlignment(ctx context.Context, w *Window, sot, text []int, numFrames int, lang string) ([]timing, error) {
	if len(text) == 0 {
		return nil, nil
	}
	// Load checked the heads against the dimensions, Transcribe that
	// there are some.
	heads := m.Config.AlignmentHeads
	var layers []int
	for _, h := range heads {
		if !slices.Contains(layers, h[0]) {
			layers = append(layers, h[0])
		}
	}
	input := append(append(append(slices.Clone(sot), m.Tokens.NoTimestamps), text...), m.Tokens.EOT)
	offset := len(sot)
	rows := make([]int, len(text))
	for t := range rows {
		rows[t] = offset + t
	}
	w.Reset()
	logits, queries, err := w.decode(ctx, input, rows, layers)
	w.Reset()
	if err != nil {
		return nil, err
	}
	V := m.Dims.Vocab
	probs := make([]float64, len(text))
	for t, tok := range text {
		row := logits[t*V : t*V+m.Tokens.EOT]
		probs[t] = math.Exp(float64(row[tok]) - logSumExp(row))
	}
	frames := min(numFrames/2, m.Dims.AudioCtx)
	if frames == 0 {
		return nil, nil
	}
	T, W, dh := len(input), m.Dims.Width, m.Dims.Width/m.Dims.Heads
	keys := map[int][]float32{}
	for _, l := range layers {
		if keys[l], err = w.crossKeys(l); err != nil {
			return nil, err
		}
	}
	// weights[r][f]: the heads' mean of the filtered, standardized
	// attention probabilities.
	weights := make([][]float32, T)
	for r := range weights {
		weights[r] = make([]float32, frames)
	}
	scale := float64(m.scale)
	p := make([][]float32, T)
	for r := range p {
		p[r] = make([]float32, frames)
	}
	filtered := make([]float32, frames)
	for _, h := range heads {
		q, k := queries[h[0]], keys[h[0]]
		for r := range T {
			qr := q[r*W+h[1]*dh : r*W+(h[1]+1)*dh]
			sc := make([]float64, frames)
			top := math.Inf(-1)
			for f := range frames {
				kf := k[f*W+h[1]*dh : f*W+(h[1]+1)*dh]
				var dot float64
				for d := range dh {
					dot += float64(qr[d]) * float64(kf[d])
				}
				sc[f] = dot * scale
				top = max(top, sc[f])
			}
			var sum float64
			for f := range sc {
				sc[f] = math.Exp(sc[f] - top)
				sum += sc[f]
			}
			for f := range sc {
				p[r][f] = float32(sc[f] / sum)
			}
		}
		// Standardize each frame's column across the tokens (layer norm
		// over the token axis, no epsilon).
		for f := range frames {
			var mean float64
			for r := range T {
				mean += float64(p[r][f])
			}
			mean /= float64(T)
			var v float64
			for r := range T {
				d := float64(p[r][f]) - mean
				v += d * d
			}
			sd := math.Sqrt(v / float64(T))
			for r := range T {
				p[r][f] = float32((float64(p[r][f]) - mean) / sd)
			}
		}
		for r := range T {
			medianFilter(p[r], filtered, medianWidth)
			for f := range frames {
				weights[r][f] += filtered[f]
			}
		}
	}
	for r := range weights {
		for f := range weights[r] {
			weights[r][f] /= float32(len(heads))
		}
	}
	path := negativeDTW(weights[offset : offset+len(text)+1])

	words, wordTokens := m.splitWords(append(slices.Clone(text), m.Tokens.EOT), lang)
	if len(wordTokens) <= 1 {
		return nil, nil
	}
	bounds := []int{0}
	for _, wt := range wordTokens[:len(wordTokens)-1] {
		bounds = append(bounds, bounds[len(bounds)-1]+len(wt))
	}
	var jumps []float64
	for i, pt := range path {
		if i == 0 || pt[0] != path[i-1][0] {
			jumps = append(jumps, float64(pt[1])/tokensPerSecond)
		}
	}
	out := make([]timing, 0, len(bounds)-1)
	for i := 0; i+1 < len(bounds) && i < len(words); i++ {
		a, b := bounds[i], bounds[i+1]
		if b >= len(jumps) {
			break
		}
		var mean float64
		for _, pr := range probs[a:min(b, len(probs))] {
			mean += pr
		}
		if n := min(b, len(probs)) - a; n > 0 {
			mean /= float64(n)
		}
		out = append(out, timing{word: words[i], tokens: wordTokens[i], start: jumps[a], end: jumps[b], probability: mean})
	}
	return out, nil
}

// medianFilter writes to out the running median of x over width values,
// the edges reflected (ctranslate2's MedianFilter); x is copied when it
// is not longer than half the width.
func medianFilter(x, out []float32, width int) {
	n, rank := len(x), width/2
	if n <= rank {
		copy(out, x)
		return
	}
	win := make([]float32, width)
	for j := range n {
		for k := -rank; k <= rank; k++ {
			read := j + k
			if read < 0 {
				read = -read
			}
			if read >= n {
				read = n - (read - n) - 2
			}
			win[k+rank] = x[read]
		}
		slices.Sort(win)
		out[j] = win[rank]
	}
}

// negativeDTW is ctranslate2's negative_dtw: the monotonic path through
// x (rows: text tokens, columns: time) of greatest total, in float32 as
// there, ties broken the same way (diagonal only when strictly best,
// then up, else left).
func negativeDTW(x [][]float32) [][2]int {
	n, m := len(x), len(x[0])
	inf := float32(math.Inf(1))
	cost := make([][]float32, n+1)
	trace := make([][]int8, n+1)
	for i := range cost {
		cost[i] = make([]float32, m+1)
		trace[i] = make([]int8, m+1)
		for j := range cost[i] {
			cost[i][j], trace[i][j] = inf, -1
		}
	}
	cost[0][0] = 0
	for j := 1; j <= m; j++ {
		for i := 1; i <= n; i++ {
			c0, c1, c2 := cost[i-1][j-1], cost[i-1][j], cost[i][j-1]
			var c float32
			var t int8
			switch {
			case c0 < c1 && c0 < c2:
				c, t = c0, 0
			case c1 < c0 && c1 < c2:
				c, t = c1, 1
			default:
				c, t = c2, 2
			}
			cost[i][j] = -x[i-1][j-1] + c
			trace[i][j] = t
		}
	}
	for k := 0; k <= m; k++ {
		trace[0][k] = 2
	}
	for k := 0; k <= n; k++ {
		trace[k][0] = 1
	}
	var path [][2]int
	for i, j := n, m; i > 0 || j > 0; {
		path = append(path, [2]int{i - 1, j - 1})
		switch trace[i][j] {
		case 0:
			i, j = i-1, j-1
		case 1:
			i--
		default:
			j--
		}
	}
	slices.Reverse(path)
	return path
}

// splitWords is faster-whisper's split_to_word_tokens: tokens grouped
// where they decode to whole characters, then joined into words at
// spaces (a group starting with a space, punctuation or a special token
// starts a word); for languages written without spaces the character
// groups are the words.
func (m *Model) splitWords(tokens []int, lang string) ([]string, [][]int) {
	subwords, subTokens := m.splitOnUnicode(tokens)
	if slices.Contains([]string{"zh", "ja", "th", "lo", "my", "yue"}, lang) {
		return subwords, subTokens
	}
	const punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
	var words []string
	var wordTokens [][]int
	for i, sub := range subwords {
		special := subTokens[i][0] >= m.Tokens.EOT
		if special || strings.HasPrefix(sub, " ") || strings.Contains(punctuation, strings.TrimSpace(sub)) || len(words) == 0 {
			words = append(words, sub)
			wordTokens = append(wordTokens, slices.Clone(subTokens[i]))
		} else {
			words[len(words)-1] += sub
			wordTokens[len(wordTokens)-1] = append(wordTokens[len(wordTokens)-1], subTokens[i]...)
		}
	}
	return words, wordTokens
}

// splitOnUnicode groups tokens until their text is whole characters (no
// replacement character that the full text does not have at that place).
func (m *Model) splitOnUnicode(tokens []int) ([]string, [][]int) {
	full := []rune(m.decodeText(tokens))
	var words []string
	var groups [][]int
	var cur []int
	offset := 0
	for _, t := range tokens {
		cur = append(cur, t)
		dec := m.decodeText(cur)
		idx := slices.Index([]rune(dec), utf8.RuneError)
		if idx < 0 || (offset+idx < len(full) && full[offset+idx] == utf8.RuneError) {
			words = append(words, dec)
			groups = append(groups, cur)
			cur = nil
			offset += utf8.RuneCountInString(dec)
		}
	}
	return words, groups
}

// decodeText decodes tokens as faster-whisper's decode_with_timestamps
// would for text and special tokens: special tokens decode to nothing.
func (m *Model) decodeText(tokens []int) string {
	return strings.ToValidUTF8(m.Tokenizer.Decode(tokens, true), "\uFFFD")
}

// mergePunctuations is faster-whisper's merge_punctuations: a word that
// is a prepended punctuation mark (after a space) joins the next word,
// an appended one joins the previous word; the emptied entries keep
// their place with no text and no tokens.
func mergePunctuations(a []timing, prepended, appended string) {
	for i, j := len(a)-2, len(a)-1; i >= 0; i-- {
		prev, next := &a[i], &a[j]
		if strings.HasPrefix(prev.word, " ") && strings.Contains(prepended, strings.TrimSpace(prev.word)) {
			next.word = prev.word + next.word
			next.tokens = append(slices.Clone(prev.tokens), next.tokens...)
			prev.word, prev.tokens = "", nil
		} else {
			j = i
		}
	}
	for i, j := 0, 1; j < len(a); j++ {
		prev, next := &a[i], &a[j]
		if !strings.HasSuffix(prev.word, " ") && strings.Contains(appended, next.word) {
			prev.word += next.word
			prev.tokens = append(prev.tokens, next.tokens...)
			next.word, next.tokens = "", nil
		} else {
			i = j
		}
	}
}

// medianOf is numpy's median (the mean of the middle two for an even
// count).
func medianOf(x []float64) float64 {
	s := slices.Clone(x)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// round2 is Python's round(x, 2): the exact binary value rounded to two
// decimals.
func round2(x float64) float64 {
	v, _ := strconv.ParseFloat(strconv.FormatFloat(x, 'f', 2, 64), 64)
	return v
}
