package tokenizer

// EncodeWithin encodes text with the post-processor's special tokens
// (BERT's [CLS] … [SEP]) and at most maxLen ids in all: the text's own
// ids are cut from the end to leave room for the special ones, as HF
// tokenizers truncates a single sequence. truncated reports a cut.
// maxLen ≤ 0 means no limit.
func (t *Tokenizer) EncodeWithin(text string, maxLen int) (ids []int, truncated bool) {
	return t.WrapWithin(t.Encode(text, false), maxLen)
}

// WrapWithin adds the post-processor's special tokens around ids already
// encoded without them, cutting ids as EncodeWithin does.
func (t *Tokenizer) WrapWithin(ids []int, maxLen int) (out []int, truncated bool) {
	if maxLen > 0 {
		room := max(0, maxLen-len(t.wrap.prefix)-len(t.wrap.suffix))
		if len(ids) > room {
			ids, truncated = ids[:room], true
		}
	}
	out = make([]int, 0, len(ids)+len(t.wrap.prefix)+len(t.wrap.suffix))
	out = append(out, t.wrap.prefix...)
	out = append(out, ids...)
	return append(out, t.wrap.suffix...), truncated
}
