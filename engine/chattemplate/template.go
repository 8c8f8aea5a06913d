package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/ardanlabs/jinja"
)

// Template is a compiled chat template. It is safe for concurrent use.
type Template struct {
	tmpl    *jinja.Template
	now     func() time.Time
	globals map[string]jinja.Value
	shape   Shape // found by probeShape in New
}

// Option configures New.
type Option func(*Template)

// WithClock sets the clock strftime_now reads (default time.Now). The
// template formats the wall-clock time of the returned value in its own
// location, as Python's naive datetime.now() does. now must be safe for
// concurrent use.
func WithClock(now func() time.Time) Option {
	return func(t *Template) { t.now = now }
}

// New compiles a chat template source.
func New(source string, opts ...Option) (*Template, error) {
	tmpl, err := jinja.Compile(preprocess(source, overriddenNames))
	if err != nil {
		return nil, fmt.Errorf("chattemplate: compile: %w", err)
	}
	t := &Template{tmpl: tmpl, now: time.Now}
	for _, opt := range opts {
		opt(t)
	}
	t.globals = map[string]jinja.Value{
		"raise_exception": jinja.NewCallable("raise_exception", raiseException),
		"strftime_now":    jinja.NewCallable("strftime_now", strftimeNow(t.now)),
	}
	for name, fn := range overriddenFilters {
		t.globals[filterPrefix+name] = jinja.NewCallable(name, fn)
	}
	t.shape = t.probeShape()
	return t, nil
}

// Input holds the variables transformers passes to a chat template.
type Input struct {
	// Messages is the conversation. Each message is an object such as
	// {"role": "user", "content": "..."}; keys the template tests for
	// (tool_calls, reasoning_content, ...) should be absent rather than
	// null when unused.
	Messages []*Object
	// Tools are the tool definitions, usually {"type": "function",
	// "function": {...}}. nil renders as Python None (no tools); an empty
	// non-nil slice is an empty list.
	Tools []*Object
	// AddGenerationPrompt appends the header that starts the assistant's
	// turn.
	AddGenerationPrompt bool
	// BOSToken and EOSToken are bos_token and eos_token; empty leaves the
	// variable undefined, as transformers does for a tokenizer without one.
	BOSToken, EOSToken string
	// Extra are further template variables (enable_thinking,
	// tools_in_user_message, date_string, custom_tools, other special
	// tokens ...). An absent key is undefined in the template, which is
	// not the same as false. Values are converted as for Object members.
	Extra map[string]any
}

// reserved are the variables Extra cannot set, as in transformers, where
// passing them as keyword arguments is an error.
var reserved = map[string]bool{
	"messages":              true,
	"tools":                 true,
	"documents":             true,
	"add_generation_prompt": true,
}

func isReserved(name string) bool {
	filter, ok := strings.CutPrefix(name, filterPrefix)
	return reserved[name] || ok && overriddenNames[filter]
}

// Render renders the template for in. A failure while rendering, whether
// the template called raise_exception or could not handle its input, is a
// *TemplateError; invalid Go values in in give an ordinary error.
func (t *Template) Render(in Input) (out string, err error) {
	vars, err := t.variables(in)
	if err != nil {
		return "", err
	}
	defer func() {
		// The engine may panic on input it does not expect; a request
		// must not take the server down with it.
		if r := recover(); r != nil {
			out, err = "", &TemplateError{Message: fmt.Sprintf("template engine failure: %v", r)}
		}
	}()
	out, err = t.tmpl.RenderValues(vars)
	if err != nil {
		return "", newTemplateError(err)
	}
	return out, nil
}

func (t *Template) variables(in Input) (map[string]jinja.Value, error) {
	vars := make(map[string]jinja.Value, len(t.globals)+8+len(in.Extra))
	for k, v := range t.globals {
		vars[k] = v
	}
	if in.BOSToken != "" {
		vars["bos_token"] = jinja.NewString(in.BOSToken)
	}
	if in.EOSToken != "" {
		vars["eos_token"] = jinja.NewString(in.EOSToken)
	}
	for k, v := range in.Extra {
		if isReserved(k) {
			return nil, fmt.Errorf("chattemplate: extra variable %q is reserved", k)
		}
		val, err := toValue(v)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: extra variable %q: %w", k, err)
		}
		vars[k] = val
	}
	messages := make([]jinja.Value, len(in.Messages))
	for i, m := range in.Messages {
		val, err := toValue(m)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: message %d: %w", i, err)
		}
		messages[i] = val
	}
	vars["messages"] = jinja.NewList(messages)
	vars["tools"] = jinja.None()
	if in.Tools != nil {
		tools := make([]jinja.Value, len(in.Tools))
		for i, tool := range in.Tools {
			val, err := toValue(tool)
			if err != nil {
				return nil, fmt.Errorf("chattemplate: tool %d: %w", i, err)
			}
			tools[i] = val
		}
		vars["tools"] = jinja.NewList(tools)
	}
	vars["documents"] = jinja.None()
	vars["add_generation_prompt"] = jinja.NewBool(in.AddGenerationPrompt)
	return vars, nil
}

// TemplateError is a failure while rendering: the template raised an
// exception (Raised is true and Message is the template's text) or could
// not handle its input (Message describes the problem). Either way the
// request, not the server, is at fault.
type TemplateError struct {
	Message string
	Raised  bool
	err     error
}

func (e *TemplateError) Error() string {
	return "chat template: " + e.Message
}

// Unwrap returns the engine's error, if any.
func (e *TemplateError) Unwrap() error { return e.err }

func newTemplateError(err error) *TemplateError {
	var raised *raisedError
	if errors.As(err, &raised) {
		return &TemplateError{Message: raised.msg, Raised: true, err: err}
	}
	return &TemplateError{Message: err.Error(), err: err}
}
