package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	"fusion/engine/prompt"
)

const tokenizeUsage = `usage: fusion tokenize --model PATH [flags] [TEXT]

Tokenizes TEXT (a raw prompt), or a chat given with --messages, with the
tokenizer and chat template of the model at PATH (a model directory or a
.gguf file), and prints {"tokens", "count", "prompt"} as POST /tokenize
does. --decode turns ids back into text, as POST /detokenize does.
--request takes the JSON body of POST /tokenize as it is.
`

func runTokenize(_ context.Context, args []string, stdout, stderr io.Writer) error {
	var (
		model, messages, tools, request, decode, thinking string
		noGenPrompt, noSpecial                            bool
	)
	fs := newFlagSet("tokenize", stderr)
	fs.Usage = func() { fmt.Fprint(stderr, tokenizeUsage); fs.PrintDefaults() }
	fs.StringVar(&model, "model", "", "model directory or .gguf file (required)")
	fs.StringVar(&messages, "messages", "", `chat messages as JSON, e.g. '[{"role":"user","content":"hi"}]'`)
	fs.StringVar(&tools, "tools", "", "tool definitions as JSON (OpenAI format)")
	fs.StringVar(&request, "request", "", "a whole POST /tokenize body as JSON")
	fs.StringVar(&decode, "decode", "", "comma-separated token ids to turn back into text")
	fs.StringVar(&thinking, "enable-thinking", "", "true or false: passed to the chat template (default: left undefined)")
	fs.BoolVar(&noGenPrompt, "no-generation-prompt", false, "do not end the chat with the assistant's generation prompt")
	fs.BoolVar(&noSpecial, "no-special", false, "do not add BOS to a raw prompt")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if model == "" {
		return usagef("--model is required")
	}
	b, err := prompt.Load(model)
	if err != nil {
		return err
	}
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)

	if decode != "" {
		ids, err := parseIDs(decode)
		if err != nil {
			return usagef("--decode: %v", err)
		}
		text, err := b.Detokenize(ids)
		if err != nil {
			return err
		}
		return enc.Encode(map[string]string{"prompt": text})
	}

	var req prompt.Request
	if request != "" {
		if err := json.Unmarshal([]byte(request), &req); err != nil {
			return usagef("--request: %v", err)
		}
	}
	if text := strings.Join(fs.Args(), " "); fs.NArg() > 0 {
		req.Prompt = &text
	}
	if messages != "" {
		if err := json.Unmarshal([]byte(messages), &req.Messages); err != nil {
			return usagef("--messages: %v", err)
		}
	}
	if tools != "" {
		if err := json.Unmarshal([]byte(tools), &req.Tools); err != nil {
			return usagef("--tools: %v", err)
		}
	}
	if thinking != "" {
		v, err := strconv.ParseBool(thinking)
		if err != nil {
			return usagef("--enable-thinking: want true or false, got %q", thinking)
		}
		req.EnableThinking = &v
	}
	if noGenPrompt {
		f := false
		req.AddGenerationPrompt = &f
	}
	if noSpecial {
		f := false
		req.AddSpecialTokens = &f
	}
	res, err := b.Tokenize(req)
	if err != nil {
		return err
	}
	return enc.Encode(res)
}

func parseIDs(s string) ([]int, error) {
	var ids []int
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' }) {
		id, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("bad token id %q", f)
		}
		ids = append(ids, id)
	}
	return ids, nil
}
