package remote

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"

	"fusion/cluster/enginepb"
	"fusion/engine"
	"fusion/engine/chattemplate"
	"fusion/engine/prompt"
	"fusion/engine/sample"
)

// The wire carries token ids as int32; ids and counts above that are a bad
// request, never a silent wrap.
func int32s(field string, ids []int) ([]int32, error) {
	if ids == nil {
		return nil, nil
	}
	out := make([]int32, len(ids))
	for i, id := range ids {
		if id < math.MinInt32 || id > math.MaxInt32 {
			return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("%s[%d]: %d is out of range", field, i, id)}
		}
		out[i] = int32(id)
	}
	return out, nil
}

func ints(ids []int32) []int {
	if ids == nil {
		return nil
	}
	out := make([]int, len(ids))
	for i, id := range ids {
		out[i] = int(id)
	}
	return out
}

func clampInt32(n int) int32 { return int32(max(math.MinInt32, min(n, math.MaxInt32))) }

// objectsJSON encodes ordered objects; nil stays absent (empty bytes).
func objectsJSON(objs []*chattemplate.Object) ([]byte, error) {
	if objs == nil {
		return nil, nil
	}
	return json.Marshal(objs)
}

func objectsFromJSON(field string, b []byte) ([]*chattemplate.Object, error) {
	if len(b) == 0 {
		return nil, nil
	}
	objs := []*chattemplate.Object{}
	if err := json.Unmarshal(b, &objs); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("%s: %w", field, err)}
	}
	return objs, nil
}

func kwargsJSON(m map[string]any) ([]byte, error) {
	if m == nil {
		return nil, nil
	}
	return json.Marshal(m)
}

func kwargsFromJSON(b []byte) (map[string]any, error) {
	if len(b) == 0 {
		return nil, nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("chat_template_kwargs: %w", err)}
	}
	return m, nil
}

// RequestToPB encodes a neutral request for the wire.
func RequestToPB(r *engine.Request) (*enginepb.Request, error) {
	var err error
	p := &enginepb.Request{
		Id: r.ID, Model: r.Model, Prompt: r.Prompt, EnableThinking: r.EnableThinking,
		HasPromptTokens: r.PromptTokens != nil, MaxTokens: clampInt32(r.MaxTokens), Stop: r.Stop,
		Priority: clampInt32(int(r.Priority)), ContinueFinal: r.ContinueFinal, ReasoningBudget: clampInt32(r.ReasoningBudget),
		StartThinking: r.StartThinking,
		Speculative:   r.Speculative,
	}
	if r.ToolChoice != (engine.ToolChoice{}) {
		p.ToolChoice = &enginepb.ToolChoice{Mode: clampInt32(int(r.ToolChoice.Mode)), Name: r.ToolChoice.Name, NoParallel: r.ToolChoice.NoParallel}
	}
	if p.MessagesJson, err = objectsJSON(r.Messages); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("messages: %w", err)}
	}
	if p.ToolsJson, err = objectsJSON(r.Tools); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("tools: %w", err)}
	}
	if p.ChatTemplateKwargsJson, err = kwargsJSON(r.ChatTemplateKwargs); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("chat_template_kwargs: %w", err)}
	}
	if p.PromptTokens, err = int32s("prompt", r.PromptTokens); err != nil {
		return nil, err
	}
	if p.Sampling, err = samplingToPB(r.Sampling); err != nil {
		return nil, err
	}
	if r.ResponseFormat != nil {
		p.ResponseFormat = &enginepb.ResponseFormat{Schema: r.ResponseFormat.Schema}
	}
	return p, nil
}

// RequestFromPB decodes a request from the wire; a malformed one is an
// *prompt.InvalidRequestError.
func RequestFromPB(p *enginepb.Request) (*engine.Request, error) {
	var err error
	r := &engine.Request{
		ID: p.GetId(), Model: p.GetModel(), Prompt: p.Prompt, EnableThinking: p.EnableThinking,
		MaxTokens: int(p.GetMaxTokens()), Stop: p.GetStop(), Priority: engine.Priority(p.GetPriority()),
		Sampling: samplingFromPB(p.GetSampling()), ContinueFinal: p.GetContinueFinal(), ReasoningBudget: int(p.GetReasoningBudget()),
		StartThinking: p.GetStartThinking(),
		Speculative:   p.GetSpeculative(),
	}
	if tc := p.GetToolChoice(); tc != nil {
		r.ToolChoice = engine.ToolChoice{Mode: engine.ToolMode(tc.GetMode()), Name: tc.GetName(), NoParallel: tc.GetNoParallel()}
		if r.ToolChoice.Mode < engine.ToolAuto || r.ToolChoice.Mode > engine.ToolNamed {
			return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("tool choice mode %d is not known", r.ToolChoice.Mode)}
		}
	}
	if r.ReasoningBudget < 0 {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("reasoning budget %d is negative", r.ReasoningBudget)}
	}
	if r.Priority < engine.PriorityRealtime || r.Priority > engine.PriorityBackground {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("priority %d is not a known class", r.Priority)}
	}
	if r.Messages, err = objectsFromJSON("messages", p.GetMessagesJson()); err != nil {
		return nil, err
	}
	if r.Tools, err = objectsFromJSON("tools", p.GetToolsJson()); err != nil {
		return nil, err
	}
	if r.ChatTemplateKwargs, err = kwargsFromJSON(p.GetChatTemplateKwargsJson()); err != nil {
		return nil, err
	}
	if p.GetHasPromptTokens() {
		r.PromptTokens = ints(p.GetPromptTokens())
		if r.PromptTokens == nil {
			r.PromptTokens = []int{}
		}
	}
	if rf := p.GetResponseFormat(); rf != nil {
		r.ResponseFormat = &engine.ResponseFormat{Schema: rf.GetSchema()}
		if len(rf.GetSchema()) == 0 {
			r.ResponseFormat.Schema = nil
		}
	}
	return r, nil
}

func samplingToPB(s sample.Params) (*enginepb.Sampling, error) {
	stops, err := int32s("stop_token_ids", s.StopTokenIDs)
	if err != nil {
		return nil, err
	}
	p := &enginepb.Sampling{
		Temperature: s.Temperature, TopK: clampInt32(s.TopK), TopP: s.TopP, MinP: s.MinP,
		RepetitionPenalty: s.RepetitionPenalty, RepetitionWindow: clampInt32(s.RepetitionWindow),
		PresencePenalty: s.PresencePenalty, FrequencyPenalty: s.FrequencyPenalty, Seed: s.Seed,
		StopTokenIds: stops, Logprobs: s.Logprobs, TopLogprobs: clampInt32(s.TopLogprobs),
	}
	if s.LogitBias != nil {
		p.LogitBias = make(map[int32]float64, len(s.LogitBias))
		for id, v := range s.LogitBias {
			if id < math.MinInt32 || id > math.MaxInt32 {
				return nil, &prompt.InvalidRequestError{Err: &sample.ParamError{Param: "logit_bias", Msg: fmt.Sprintf("token id %d is out of range", id)}}
			}
			p.LogitBias[int32(id)] = v
		}
	}
	return p, nil
}

func samplingFromPB(p *enginepb.Sampling) sample.Params {
	if p == nil {
		return sample.DefaultParams()
	}
	s := sample.Params{
		Temperature: p.GetTemperature(), TopK: int(p.GetTopK()), TopP: p.GetTopP(), MinP: p.GetMinP(),
		RepetitionPenalty: p.GetRepetitionPenalty(), RepetitionWindow: int(p.GetRepetitionWindow()),
		PresencePenalty: p.GetPresencePenalty(), FrequencyPenalty: p.GetFrequencyPenalty(), Seed: p.Seed,
		StopTokenIDs: ints(p.GetStopTokenIds()), Logprobs: p.GetLogprobs(), TopLogprobs: int(p.GetTopLogprobs()),
	}
	if p.LogitBias != nil {
		s.LogitBias = make(map[int]float64, len(p.LogitBias))
		for id, v := range p.LogitBias {
			s.LogitBias[int(id)] = v
		}
	}
	return s
}

func logprobsToPB(ts []engine.TokenLogprob) []*enginepb.TokenLogprob {
	if ts == nil {
		return nil
	}
	out := make([]*enginepb.TokenLogprob, len(ts))
	for i, t := range ts {
		out[i] = &enginepb.TokenLogprob{Id: clampInt32(t.ID), Text: t.Text, Logprob: t.Logprob}
	}
	return out
}

func logprobsFromPB(ts []*enginepb.TokenLogprob) []engine.TokenLogprob {
	if ts == nil {
		return nil
	}
	out := make([]engine.TokenLogprob, len(ts))
	for i, t := range ts {
		out[i] = engine.TokenLogprob{ID: int(t.GetId()), Text: t.GetText(), Logprob: t.GetLogprob()}
	}
	return out
}

// EventToPB encodes an event for the wire.
func EventToPB(ev engine.Event) *enginepb.Event {
	p := &enginepb.Event{
		Text: ev.Text, Reasoning: ev.Reasoning, Tokens: logprobsToPB(ev.Tokens), Done: ev.Done,
		FinishReason: string(ev.FinishReason), StopSequence: ev.StopSequence,
	}
	for _, tc := range ev.ToolCalls {
		p.ToolCalls = append(p.ToolCalls, &enginepb.ToolCall{
			Index: clampInt32(tc.Index), Id: tc.ID, Name: tc.Name, Arguments: tc.Arguments, Undeclared: tc.Undeclared})
	}
	for _, alts := range ev.TopLogprobs {
		p.TopLogprobs = append(p.TopLogprobs, &enginepb.TopLogprobs{Alternatives: logprobsToPB(alts)})
	}
	if ev.Done || ev.Usage != (engine.Usage{}) {
		p.Usage = &enginepb.Usage{PromptTokens: clampInt32(ev.Usage.PromptTokens),
			CompletionTokens: clampInt32(ev.Usage.CompletionTokens), CachedTokens: clampInt32(ev.Usage.CachedTokens),
			CacheWriteTokens: clampInt32(ev.Usage.CacheWriteTokens),
			DraftedTokens:    clampInt32(ev.Usage.DraftedTokens), AcceptedTokens: clampInt32(ev.Usage.AcceptedTokens)}
	}
	if ev.Err != nil {
		p.Error = errorToPB(ev.Err)
	}
	return p
}

// EventFromPB decodes an event from the wire.
func EventFromPB(p *enginepb.Event) engine.Event {
	ev := engine.Event{
		Text: p.GetText(), Reasoning: p.GetReasoning(), Tokens: logprobsFromPB(p.GetTokens()), Done: p.GetDone(),
		FinishReason: engine.FinishReason(p.GetFinishReason()), StopSequence: p.GetStopSequence(),
	}
	for _, tc := range p.GetToolCalls() {
		ev.ToolCalls = append(ev.ToolCalls, engine.ToolCall{
			Index: int(tc.GetIndex()), ID: tc.GetId(), Name: tc.GetName(), Arguments: tc.GetArguments(), Undeclared: tc.GetUndeclared()})
	}
	for _, alts := range p.GetTopLogprobs() {
		ev.TopLogprobs = append(ev.TopLogprobs, logprobsFromPB(alts.GetAlternatives()))
	}
	if u := p.GetUsage(); u != nil {
		ev.Usage = engine.Usage{PromptTokens: int(u.GetPromptTokens()), CompletionTokens: int(u.GetCompletionTokens()), CachedTokens: int(u.GetCachedTokens()),
			CacheWriteTokens: int(u.GetCacheWriteTokens()),
			DraftedTokens:    int(u.GetDraftedTokens()), AcceptedTokens: int(u.GetAcceptedTokens())}
	}
	if e := p.GetError(); e != nil {
		ev.Err = errorFromPB(e)
	}
	return ev
}

func promptRequestToPB(model string, r prompt.Request) (*enginepb.TokenizeRequest, error) {
	var err error
	p := &enginepb.TokenizeRequest{Model: model, Prompt: r.Prompt, AddGenerationPrompt: r.AddGenerationPrompt,
		EnableThinking: r.EnableThinking, AddSpecialTokens: r.AddSpecialTokens, StartThinking: r.StartThinking, ContinueFinal: r.ContinueFinal}
	if p.MessagesJson, err = objectsJSON(r.Messages); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("messages: %w", err)}
	}
	if p.ToolsJson, err = objectsJSON(r.Tools); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("tools: %w", err)}
	}
	if p.ChatTemplateKwargsJson, err = kwargsJSON(r.ChatTemplateKwargs); err != nil {
		return nil, &prompt.InvalidRequestError{Err: fmt.Errorf("chat_template_kwargs: %w", err)}
	}
	return p, nil
}

func promptRequestFromPB(p *enginepb.TokenizeRequest) (prompt.Request, error) {
	var err error
	r := prompt.Request{Prompt: p.Prompt, AddGenerationPrompt: p.AddGenerationPrompt, EnableThinking: p.EnableThinking,
		AddSpecialTokens: p.AddSpecialTokens, StartThinking: p.GetStartThinking(), ContinueFinal: p.GetContinueFinal()}
	if r.Messages, err = objectsFromJSON("messages", p.GetMessagesJson()); err != nil {
		return r, err
	}
	if r.Tools, err = objectsFromJSON("tools", p.GetToolsJson()); err != nil {
		return r, err
	}
	r.ChatTemplateKwargs, err = kwargsFromJSON(p.GetChatTemplateKwargsJson())
	return r, err
}

func modelToPB(m engine.ModelInfo) *enginepb.ModelInfo {
	return &enginepb.ModelInfo{Id: m.ID, Path: m.Path, Format: m.Format, Loaded: m.Loaded, Created: m.Created, Kind: m.Kind}
}

func modelFromPB(m *enginepb.ModelInfo) engine.ModelInfo {
	return engine.ModelInfo{ID: m.GetId(), Path: m.GetPath(), Format: m.GetFormat(), Loaded: m.GetLoaded(), Created: m.GetCreated(), Kind: m.GetKind()}
}

func embedRequestToPB(req *engine.EmbedRequest) (*enginepb.EmbedRequest, error) {
	out := &enginepb.EmbedRequest{Model: req.Model, Dimensions: int32(min(req.Dimensions, math.MaxInt32)), NoTruncate: req.NoTruncate,
		Prompt: req.Prompt, PromptName: req.PromptName, Inputs: make([]*enginepb.EmbedInput, len(req.Inputs))}
	for i, in := range req.Inputs {
		p := &enginepb.EmbedInput{Text: in.Text, IsTokens: in.Tokens != nil}
		if in.Tokens != nil {
			var err error
			if p.Tokens, err = int32s(fmt.Sprintf("input[%d]", i), in.Tokens); err != nil {
				return nil, err
			}
		}
		out.Inputs[i] = p
	}
	return out, nil
}

func embedRequestFromPB(p *enginepb.EmbedRequest) *engine.EmbedRequest {
	out := &engine.EmbedRequest{Model: p.GetModel(), Dimensions: int(p.GetDimensions()), NoTruncate: p.GetNoTruncate(),
		Prompt: p.Prompt, PromptName: p.GetPromptName(), Inputs: make([]engine.EmbedInput, len(p.GetInputs()))}
	for i, in := range p.GetInputs() {
		out.Inputs[i] = engine.EmbedInput{Text: in.GetText()}
		if in.GetIsTokens() {
			out.Inputs[i].Tokens = ints(in.GetTokens())
			if out.Inputs[i].Tokens == nil {
				out.Inputs[i].Tokens = []int{}
			}
		}
	}
	return out
}

func embedResultToPB(r *engine.EmbedResult) *enginepb.EmbedReply {
	out := &enginepb.EmbedReply{PromptTokens: int32(r.PromptTokens), Vectors: make([]*enginepb.Vector, len(r.Vectors))}
	for i, v := range r.Vectors {
		out.Vectors[i] = &enginepb.Vector{Values: v}
	}
	for _, i := range r.Truncated {
		out.Truncated = append(out.Truncated, int32(i))
	}
	return out
}

func embedResultFromPB(p *enginepb.EmbedReply) *engine.EmbedResult {
	out := &engine.EmbedResult{PromptTokens: int(p.GetPromptTokens()), Vectors: make([][]float32, len(p.GetVectors()))}
	for i, v := range p.GetVectors() {
		out.Vectors[i] = v.GetValues()
	}
	for _, i := range p.GetTruncated() {
		out.Truncated = append(out.Truncated, int(i))
	}
	return out
}

func rerankResultToPB(r *engine.RerankResult) *enginepb.RerankReply {
	out := &enginepb.RerankReply{Scores: r.Scores, PromptTokens: int32(r.PromptTokens)}
	for _, i := range r.Truncated {
		out.Truncated = append(out.Truncated, int32(i))
	}
	return out
}

func rerankResultFromPB(p *enginepb.RerankReply) *engine.RerankResult {
	out := &engine.RerankResult{Scores: p.GetScores(), PromptTokens: int(p.GetPromptTokens())}
	for _, i := range p.GetTruncated() {
		out.Truncated = append(out.Truncated, int(i))
	}
	return out
}

func transcribeRequestToPB(r *engine.TranscribeRequest) *enginepb.TranscribeRequest {
	out := &enginepb.TranscribeRequest{Model: r.Model, Audio: r.Audio, Language: r.Language, Translate: r.Translate,
		Temperature: r.Temperature, MaxBytes: r.MaxBytes, MaxSeconds: r.MaxSeconds, WordTimestamps: r.WordTimestamps,
		MaxTokens: int32(max(min(r.MaxTokens, math.MaxInt32), math.MinInt32)), VadFilter: r.VADFilter, Batched: r.Batched}
	for _, s := range r.Speech {
		out.Speech = append(out.Speech, int64(s.Start), int64(s.End))
	}
	if r.Pieces != [2]int{} {
		out.Pieces = []int32{int32(max(min(r.Pieces[0], math.MaxInt32), -1)), int32(max(min(r.Pieces[1], math.MaxInt32), -1))}
	}
	return out
}

func transcribeRequestFromPB(p *enginepb.TranscribeRequest) *engine.TranscribeRequest {
	out := &engine.TranscribeRequest{Model: p.GetModel(), Audio: p.GetAudio(), Language: p.GetLanguage(), Translate: p.GetTranslate(),
		Temperature: p.GetTemperature(), MaxBytes: p.GetMaxBytes(), MaxSeconds: p.GetMaxSeconds(), WordTimestamps: p.GetWordTimestamps(),
		MaxTokens: int(p.GetMaxTokens()), VADFilter: p.GetVadFilter(), Batched: p.GetBatched()}
	sp := p.GetSpeech()
	for i := 0; i+1 < len(sp); i += 2 {
		out.Speech = append(out.Speech, engine.SpeechRange{Start: int(sp[i]), End: int(sp[i+1])})
	}
	if len(sp)%2 == 1 {
		// An odd count is not ranges: a range the node refuses.
		out.Speech = append(out.Speech, engine.SpeechRange{Start: int(sp[len(sp)-1]), End: -1})
	}
	if pc := p.GetPieces(); len(pc) == 2 {
		out.Pieces = [2]int{int(pc[0]), int(pc[1])}
	} else if len(pc) != 0 {
		out.Pieces = [2]int{-1, -1}
	}
	return out
}

func transcribeResultToPB(r *engine.TranscribeResult) *enginepb.TranscribeReply {
	out := &enginepb.TranscribeReply{Text: r.Text, Language: r.Language, LanguageProbability: r.LanguageProbability, Duration: r.Duration,
		Segments: make([]*enginepb.TranscribeSegment, len(r.Segments))}
	for i, s := range r.Segments {
		out.Segments[i] = transcribeSegmentToPB(s)
	}
	return out
}

func transcribeSegmentToPB(s engine.TranscribeSegment) *enginepb.TranscribeSegment {
	toks, _ := int32s("tokens", s.Tokens) // vocabulary ids: always in range
	out := &enginepb.TranscribeSegment{Id: int32(s.ID), Seek: int32(s.Seek), Start: s.Start, End: s.End, Text: s.Text,
		Tokens: toks, Temperature: s.Temperature, AvgLogprob: s.AvgLogprob, CompressionRatio: s.CompressionRatio,
		NoSpeechProb: s.NoSpeechProb}
	for _, w := range s.Words {
		out.Words = append(out.Words, &enginepb.TranscribeWord{Start: w.Start, End: w.End, Word: w.Word, Probability: w.Probability})
	}
	return out
}

func transcribeResultFromPB(p *enginepb.TranscribeReply) *engine.TranscribeResult {
	out := &engine.TranscribeResult{Text: p.GetText(), Language: p.GetLanguage(), LanguageProbability: p.GetLanguageProbability(), Duration: p.GetDuration(),
		Segments: make([]engine.TranscribeSegment, len(p.GetSegments()))}
	for i, s := range p.GetSegments() {
		out.Segments[i] = transcribeSegmentFromPB(s)
	}
	return out
}

func transcribeSegmentFromPB(s *enginepb.TranscribeSegment) engine.TranscribeSegment {
	out := engine.TranscribeSegment{ID: int(s.GetId()), Seek: int(s.GetSeek()), Start: s.GetStart(), End: s.GetEnd(),
		Text: s.GetText(), Tokens: ints(s.GetTokens()), Temperature: s.GetTemperature(), AvgLogprob: s.GetAvgLogprob(),
		CompressionRatio: s.GetCompressionRatio(), NoSpeechProb: s.GetNoSpeechProb()}
	for _, w := range s.GetWords() {
		out.Words = append(out.Words, engine.TranscribeWord{Start: w.GetStart(), End: w.GetEnd(), Word: w.GetWord(), Probability: w.GetProbability()})
	}
	return out
}

// pcmToBytes packs 16-bit samples little-endian.
func pcmToBytes(pcm []int16) []byte {
	b := make([]byte, 2*len(pcm))
	for i, s := range pcm {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(s))
	}
	return b
}

// pcmFromBytes unpacks what pcmToBytes packed (an odd last byte is dropped).
func pcmFromBytes(b []byte) []int16 {
	pcm := make([]int16, len(b)/2)
	for i := range pcm {
		pcm[i] = int16(binary.LittleEndian.Uint16(b[2*i:]))
	}
	return pcm
}

func imageRequestToPB(r *engine.ImageRequest) *enginepb.ImageRequest {
	return &enginepb.ImageRequest{Model: r.Model, Prompt: r.Prompt, N: int32(r.N), Width: int32(r.Width), Height: int32(r.Height),
		Steps: int32(r.Steps), Guidance: r.Guidance, Seed: r.Seed, Progress: r.OnStep != nil,
		First: int32(r.First), Total: int32(r.Total), Partials: int32(r.Partials)}
}

func imageRequestFromPB(p *enginepb.ImageRequest) *engine.ImageRequest {
	return &engine.ImageRequest{Model: p.GetModel(), Prompt: p.GetPrompt(), N: int(p.GetN()), Width: int(p.GetWidth()),
		Height: int(p.GetHeight()), Steps: int(p.GetSteps()), Guidance: p.GetGuidance(), Seed: p.GetSeed(),
		First: int(p.GetFirst()), Total: int(p.GetTotal()), Partials: int(p.GetPartials())}
}
