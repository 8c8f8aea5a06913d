package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"
)

func mustRender(t *testing.T, src string, in Input, opts ...Option) string {
	t.Helper()
	tmpl, err := New(src, opts...)
	if err != nil {
		t.Fatalf("New(%q): %v", src, err)
	}
	out, err := tmpl.Render(in)
	if err != nil {
		t.Fatalf("Render(%q): %v", src, err)
	}
	return out
}

func TestRaiseException(t *testing.T) {
	tmpl, err := New(`before{% if messages | length != 1 %}{{ raise_exception("This model only supports single tool-calls at once!") }}{% endif %}`)
	if err != nil {
		t.Fatal(err)
	}
	out, err := tmpl.Render(Input{})
	if out != "" {
		t.Errorf("output %q, want none on error", out)
	}
	var te *TemplateError
	if !errors.As(err, &te) {
		t.Fatalf("err = %v (%T), want *TemplateError", err, err)
	}
	if !te.Raised || te.Message != "This model only supports single tool-calls at once!" {
		t.Errorf("TemplateError = %+v", te)
	}
	if got, want := err.Error(), "chat template: This model only supports single tool-calls at once!"; got != want {
		t.Errorf("Error() = %q, want %q", got, want)
	}
}

func TestRuntimeErrorIsTemplateError(t *testing.T) {
	tmpl, err := New(`{{ messages[0].content.startswith('x') }}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{Messages: []*Object{NewObject("role", "user")}})
	var te *TemplateError
	if !errors.As(err, &te) || te.Raised || te.Message == "" {
		t.Fatalf("err = %#v, want a non-raised *TemplateError", err)
	}
	if errors.Unwrap(te) == nil {
		t.Error("TemplateError does not wrap the engine error")
	}
}

func TestStrftimeNow(t *testing.T) {
	now := func() time.Time { return time.Date(2024, time.July, 26, 9, 3, 7, 0, time.FixedZone("X", 3600)) }
	tests := []struct {
		format string
		want   string
	}{
		{"%d %b %Y", "26 Jul 2024"},
		{"%Y-%m-%d %H:%M:%S", "2024-07-26 09:03:07"},
		{"%A %B %j %I%p %y %e", "Friday July 208 09AM 24 26"},
		{"%a %U %W %w %u %V %G", "Fri 29 30 5 5 30 2024"},
		{"%c|%x|%X|%D|%F|%T|%R", "Fri Jul 26 09:03:07 2024|07/26/24|09:03:07|07/26/24|2024-07-26|09:03:07|09:03"},
		{"[%Z][%z] %% %q", "[][] % %q"},
	}
	for _, tt := range tests {
		src := fmt.Sprintf("{{ strftime_now(%q) }}", tt.format)
		if got := mustRender(t, src, Input{}, WithClock(now)); got != tt.want {
			t.Errorf("strftime_now(%q) = %q, want %q", tt.format, got, tt.want)
		}
	}
}

func TestSlicing(t *testing.T) {
	in := Input{Messages: []*Object{msg("system", "s"), msg("user", "u1"), msg("assistant", "a"), msg("user", "u2")}}
	tests := []struct{ src, want string }{
		{`{% for m in messages[::-1] %}{{ m.role }},{% endfor %}`, "user,assistant,user,system,"},
		{`{{ messages[1:] | length }} {{ messages[:-1] | length }} {{ messages[-1].content }}`, "3 3 u2"},
		{`{{ messages[::2] | map(attribute='content') | join('|') }}`, "s|a"},
		{`{{ "héllo"[::-1] }} {{ "abcdef"[1:4] }} {{ "abcdef"[::2] }} {{ "abc"[5:] }}`, "olléh bcd ace "},
	}
	for _, tt := range tests {
		if got := mustRender(t, tt.src, in); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestNamespace(t *testing.T) {
	src := `{%- set ns = namespace(last_user=-1, seen=false) -%}
{%- for m in messages -%}
  {%- if m.role == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}
  {%- if m.role == 'assistant' -%}{%- set ns.seen = true -%}{%- endif -%}
{%- endfor -%}
{{ ns.last_user }} {{ ns.seen }}`
	in := Input{Messages: []*Object{msg("user", "a"), msg("assistant", "b"), msg("user", "c"), msg("tool", "d")}}
	if got := mustRender(t, src, in); got != "2 True" {
		t.Errorf("got %q, want %q", got, "2 True")
	}
}

func TestVariables(t *testing.T) {
	src := `{{ enable_thinking is defined }}/{{ enable_thinking is false }}|{{ tools is none }}|{{ (tools or []) | length }}|` +
		`{{ bos_token is defined }}|{{ eos_token }}|{{ documents is none }}|{{ add_generation_prompt }}`
	tests := []struct {
		name string
		in   Input
		want string
	}{
		{"omitted", Input{}, "False/False|True|0|False||True|False"},
		{"thinking off", Input{Extra: map[string]any{"enable_thinking": false}}, "True/True|True|0|False||True|False"},
		{"tools and tokens", Input{
			Tools:               []*Object{NewObject("type", "function")},
			BOSToken:            "<s>",
			EOSToken:            "</s>",
			AddGenerationPrompt: true,
		}, "False/False|False|1|True|</s>|True|True"},
		{"empty tools", Input{Tools: []*Object{}}, "False/False|False|0|False||True|False"},
	}
	for _, tt := range tests {
		if got := mustRender(t, src, tt.in); got != tt.want {
			t.Errorf("%s: got %q, want %q", tt.name, got, tt.want)
		}
	}
}

func TestReservedExtra(t *testing.T) {
	tmpl, err := New(`x`)
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"messages", "tools", "add_generation_prompt", "documents", "fusion_tojson"} {
		if _, err := tmpl.Render(Input{Extra: map[string]any{name: true}}); err == nil {
			t.Errorf("Extra[%q] accepted", name)
		}
	}
	if _, err := tmpl.Render(Input{Extra: map[string]any{"bad": make(chan int)}}); err == nil {
		t.Error("a channel value was accepted")
	}
}

func TestPythonStr(t *testing.T) {
	in := Input{
		Messages: []*Object{NewObject("role", "user", "content", nil)},
		Extra:    map[string]any{"f": 1.0, "l": []any{"it's", `say "x"`, int64(2), nil, true}},
	}
	tests := []struct{ src, want string }{
		{`{{ messages[0].content }}|{{ messages[0].content | trim }}|{{ messages[0].content | string }}`, "None|None|None"},
		{`{{ f }}|{{ 10 / 4 }}|{{ l }}`, `1.0|2.5|["it's", 'say "x"', 2, None, True]`},
		{`{{ l | join(',') }}|{{ l | length }}|{{ "\u00e9\x41" }}`, `it's,say "x",2,None,True|5|éA`},
		{`{{ {'a': {'b': 1}} }}`, `{'a': {'b': 1}}`},
	}
	for _, tt := range tests {
		if got := mustRender(t, tt.src, in); got != tt.want {
			t.Errorf("%s = %q, want %q", tt.src, got, tt.want)
		}
	}
}

func TestTrimBlocks(t *testing.T) {
	src := "<s>\n" +
		"  {% for m in messages %}\n" +
		"    {{ m.role }}\n" +
		"  {% endfor %}\n" +
		"</s>\n"
	in := Input{Messages: []*Object{msg("user", "a"), msg("assistant", "b")}}
	if got, want := mustRender(t, src, in), "<s>\n    user\n    assistant\n</s>"; got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}

func TestConcurrentRender(t *testing.T) {
	tmpl, err := New(`{% set ns = namespace(n=0) %}{% for m in messages %}{% set ns.n = ns.n + 1 %}{% endfor %}{{ ns.n }}:{{ messages | tojson }}`)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := range 16 {
		wg.Go(func() {
			msgs := make([]*Object, i)
			for j := range msgs {
				msgs[j] = msg("user", strings.Repeat("x", j))
			}
			for range 50 {
				out, err := tmpl.Render(Input{Messages: msgs})
				if err != nil {
					errs <- err
					return
				}
				if !strings.HasPrefix(out, fmt.Sprintf("%d:", i)) {
					errs <- fmt.Errorf("goroutine %d got %q", i, out)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestCompileError(t *testing.T) {
	if _, err := New(`{% if x %}unclosed`); err == nil {
		t.Error("unclosed if compiled")
	}
}

func TestEnginePanicIsTemplateError(t *testing.T) {
	// The engine's string repetition panics on a negative count.
	tmpl, err := New(`{{ 'ab' * n }}`)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tmpl.Render(Input{Extra: map[string]any{"n": -1}})
	var te *TemplateError
	if !errors.As(err, &te) || te.Raised || !strings.HasPrefix(te.Message, "template engine failure: ") {
		t.Errorf("err = %#v, want a recovered *TemplateError", err)
	}
}
