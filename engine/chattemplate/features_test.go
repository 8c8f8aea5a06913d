package chattemplate

import "math"

// Small templates exercising one engine feature each, rendered in the
// parity run next to the real templates.

var featureTemplates = map[string]string{
	"f_tojson": `{{ v | tojson }}
{{ v | tojson(indent=2) }}
{{ v | tojson(indent=4) }}
{{ v | tojson(ensure_ascii=True) }}
{{ v | tojson(sort_keys=true) }}
{{ v | tojson(separators=(',', ':')) }}
{{ "a<b>&c'd" | tojson }}|{{ [] | tojson(indent=2) }}|{{ {} | tojson }}|{{ 1.0 | tojson }}|{{ none | tojson }}
{{ {'b': 1, 'a': [1, 2.5, none, true, 'x']} | tojson }}
{{ messages | tojson }}`,

	"f_raise": `{% for m in messages %}{% if m.role not in ['system', 'user', 'assistant'] %}` +
		`{{ raise_exception('Only user and assistant roles are supported, got ' + m.role + '!') }}` +
		`{% endif %}{{ m.role }};{% endfor %}`,

	"f_strftime": `{{ strftime_now("%Y-%m-%d %H:%M:%S|%d %b %Y|%A %B %j %I%p %y %e|%a %U %W %w %u %V %G|%%|%c|%x|%X|%D|%F|%T|%R|%Z|%z|%h|%C") }}`,

	"f_slicing": `{{ messages[::-1] | map(attribute='role') | join(',') }}
{{ messages[1:] | length }} {{ messages[:-1] | length }} {{ messages[-2:] | length }}
{{ "abcdef"[::-1] }} {{ "abcdef"[1:4] }} {{ "héllo wörld"[::2] }} {{ "héllo"[-3:] }}
{{ [1, 2, 3, 4, 5][::2] | join(',') }} {{ [1, 2, 3, 4, 5][::-2] | join(',') }} {{ [1, 2, 3][5:] | length }}
{{ messages[0].content[:5] }}`,

	"f_namespace": `{% set ns = namespace(count=0, found=false, last='') %}` +
		`{% for m in messages %}{% if m.role == 'user' %}{% set ns.count = ns.count + 1 %}{% set ns.last = m.content %}{% endif %}` +
		`{% if m.role == 'assistant' %}{% set ns.found = true %}{% endif %}{% endfor %}` +
		`{{ ns.count }} {{ ns.found }} {{ ns.last }}`,

	"f_strings": `{% set s = "Hello, wörld!" %}` +
		`{{ s.startswith('He') }} {{ s.endswith('!') }} {{ s.startswith('x') }}
{{ s.split(' ') | join('|') }} {{ s.split(',') | length }} {{ "a b  c".split() | join('|') }}
{{ "  x y  ".strip() }}|{{ s.strip('!H') }}|{{ s.lstrip('Hel') }}|{{ s.rstrip('!d') }}|{{ "\n\nx\n".lstrip('\n') }}|{{ "x\n\n".rstrip('\n') }}
{{ s.replace('l', 'L') }} {{ s.upper() }} {{ s.lower() }} {{ "hello big world".title() }}
{{ messages[0].content.split('</think>')[-1].lstrip('\n') }}`,

	"f_loop": `{% for m in messages %}{{ loop.index }}/{{ loop.index0 }}/{{ loop.first }}/{{ loop.last }}/` +
		`{{ loop.length }}/{{ loop.revindex }}/{{ loop.revindex0 }}{% if not loop.first %}/{{ loop.previtem.role }}{% endif %};{% endfor %}`,

	"f_tests": `{{ x is string }} {{ x is defined }} {{ y is defined }} {{ y is undefined }} {{ none is none }} {{ x is none }}
{{ {} is mapping }} {{ [] is mapping }} {{ [] is iterable }} {{ "s" is iterable }} {{ [] is sequence }} {{ 1 is iterable }}
{{ 1 is number }} {{ 1 is integer }} {{ 1.5 is float }} {{ true is boolean }} {{ 3 is odd }} {{ 4 is even }}
{{ enable_thinking is defined and enable_thinking is false }} {{ flag is true }} {{ flag is not false }}`,

	"f_filters": `{{ messages | length }} {{ "  t  " | trim }}|{{ "xxtxx" | trim('x') }}
{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}
{{ messages | selectattr('role', 'equalto', 'user') | list | length }} {{ messages | rejectattr('role', 'equalto', 'user') | map(attribute='role') | join(',') }}
{{ [1, none, 2] | reject('none') | list | length }} {{ [1, none, 2] | select('none') | list | length }}
{{ (messages | first).role }} {{ (messages | last).role }}
{{ missing | default('dflt') }} {{ x | default('dflt') }} {{ '' | default('e', true) }}
{{ [3, 1, 2] | join(',') }} {{ [3, 1, 2] | sort | join(',') }} {{ ['a', 'b'] | join }}
{{ d | string }} {{ none | string }} {{ none | trim }} {{ 42 | string }} {{ [1, 'a'] | join('-') }}
{{ messages | map(attribute='role') | join(', ') }}`,

	"f_in": `{{ 'a' in 'abc' }} {{ 'role' in messages[0] }} {{ 'tool_calls' in messages[0] }} {{ 2 in [1, 2] }} {{ 'z' not in 'abc' }} {{ 'x' in d }}`,

	"f_loopcontrols": `{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}` +
		`|{% for m in messages %}{% if m.role == 'assistant' %}{% break %}{% endif %}{{ m.role }}{% endfor %}`,

	"f_whitespace": "<start>\n" +
		"  {% for m in messages %}\n" +
		"    {{ m.role }}:\n" +
		"    {% if m.content %}\n" +
		"      {{ m.content }}\n" +
		"    {% endif %}\n" +
		"  {% endfor %}\n" +
		"  {#- comment #}\n" +
		"{%- if add_generation_prompt %}\n" +
		"  gen\n" +
		"{% endif %}\n" +
		"<end>  {{- ' tight ' -}}  !\n",

	"f_macro": `{% macro f(x, y='d') %}[{{ x }}{{ y }}]{% endmacro %}{{ f(1) }}{{ f(2, 'z') }}{{ f(y='k', x=3) }}`,

	"f_scoping": `{% set x = 'outer' %}{% for m in messages %}{% set x = m.role %}{% endfor %}{{ x }}` +
		`|{% if true %}{% set y = 'inner' %}{% endif %}{{ y }}`,

	"f_inline_if": `{{ 'yes' if messages else 'no' }}|{{ 'a' if false }}|{{ 'b' if true }}|{{ 1 if x == 'hi' else 2 }}`,

	"f_pystr": `{{ none }}|{{ 1.0 }}|{{ 2.5 }}|{{ 10 / 4 }}|{{ 4 / 2 }}|{{ d }}|{{ d.get('zz') }}|{{ missing }}|{{ true }}
{{ {'a': {'b': [1, {'c': none}]}} }}|{{ "it's" }}|{{ ["it's", 'say "x"', 'both \' "', 'tab\there'] }}
{{ v.args }}|{{ messages[2] }}`,

	"f_literals": `{{ '\u00e9\x41\t|\\|\'|\"|\101|\U0001F600|\d' }}|{{ "multi
line" }}|{{ 'a' ~ "b" ~ 1 }}`,

	"f_more_filters": `{{ "abc" | first }}{{ "abc" | last }}{{ [] | first }}|{{ d | list | join(',') }}|{{ d | first }}|{{ none | upper }}{{ x | upper }}{{ "ÀB" | lower }}
{{ "a b".split(" ", 1) | length }}|{% for c in "héllo" %}{{ c }},{% endfor %}|{{ [3, 1, 2] | max }}{{ [3, 1, 2] | min }}{{ [1, 2] | sum }}
{{ x | replace('h', 'H') }}|{{ x | wordcount }}|{{ range(3) | list }}|{{ x[0] }}{{ x[-1] }}{{ x[99] }}|{{ d.keys() | list | join(',') }}|{{ d.values() | list | join(',') }}|{{ d.get('zz', 'dflt') }}
{{ messages | selectattr('content', 'string') | list | length }}|{{ [1, 2] | map('string') | join(',') }}|{{ 'a' if x else 'b' }}{{ not x }}{{ x and 1 }}{{ none or 'z' }}`,

	"f_dictsort": `{% for k, v in ds | dictsort %}{{ k }}={{ v }};{% endfor %}|{% for k, v in ds | dictsort(true) %}{{ k }};{% endfor %}|` +
		`{% for k, v in ds | dictsort(reverse=true) %}{{ k }};{% endfor %}|{% for k, v in dv | dictsort(by='value') %}{{ k }};{% endfor %}|` +
		`{% for k, v in dv | dictsort(false, 'value', true) %}{{ k }};{% endfor %}|{{ {} | dictsort | length }}`,

	"f_sort": `{{ ['b', 'A', 'a', 'C'] | sort | join(',') }}|{{ ['b', 'A', 'a', 'C'] | sort(case_sensitive=true) | join(',') }}|` +
		`{{ [3, 1.5, true, 2] | sort(reverse=true) | join(',') }}|{% for m in messages | sort(attribute='role') %}{{ m.role }};{% endfor %}|` +
		`{% for m in messages | sort(true, attribute='content') %}{{ m.role }};{% endfor %}|{{ d | sort | join(',') }}|{{ [] | sort | length }}`,

	"f_arith": `{{ 1 + 2 }} {{ 7 // 2 }} {{ 7 % 3 }} {{ 2 * 3 }} {{ 'ab' * 2 }} {{ messages | length - 1 }} {{ -1 }} {{ 10 - 3 - 2 }}`,
}

// featureCases renders each feature template with one shared input, plus
// a raising input for f_raise.
func featureCases() []parityCase {
	messages := []*Object{
		msg("system", "<think>\nsys reasoning\n</think>\n\nSystem: be brief."),
		msg("user", "Hello, wörld! \"quoted\" \\ back"),
		NewObject("role", "assistant", "content", "Hi there.", "reasoning_content", "think…"),
		msg("user", "Second question?"),
	}
	value := NewObject(
		"name", "get_weather",
		"描述", "Température à Zürich — “quotes” & <tags>",
		"args", NewObject("zeta", 1.0, "alpha", []any{int64(1), 2.5, 1e-07, nil, true, "a\"b\\c\n"}, "nested", NewObject()),
		"big", 1e16,
		"small", math.Copysign(0, -1),
		"emoji", "🎉",
	)
	extra := map[string]any{
		"v":               value,
		"x":               "hi",
		"d":               NewObject("b", int64(2), "a", "one"),
		"ds":              NewObject("beta", int64(1), "Alpha", int64(2), "alpha", int64(3), "_x", int64(4), "Zeta", int64(5), "données", int64(6), "城市", int64(7)),
		"dv":              NewObject("a", "Banana", "b", "apple", "c", "cherry", "d", "Apple"),
		"flag":            true,
		"enable_thinking": false,
	}
	var cases []parityCase
	for name := range featureTemplates {
		cases = append(cases, parityCase{
			id:     name,
			family: name,
			input:  Input{Messages: messages, Extra: extra, AddGenerationPrompt: true},
		})
	}
	cases = append(cases, parityCase{
		id:     "f_raise-tool",
		family: "f_raise",
		note:   "tool role",
		expect: expectRaise,
		input:  Input{Messages: append(messages[1:3:3], msg("tool", "result"))},
	})
	return cases
}
