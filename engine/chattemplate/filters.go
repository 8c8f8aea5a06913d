package chattemplate

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/ardanlabs/jinja"
)

// builtinFunc is the engine's signature for filters and global functions.
type builtinFunc = func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error)

// overriddenFilters are the filters implemented here rather than by the
// engine, because HF templates depend on Python's behaviour for them.
var overriddenFilters = map[string]builtinFunc{
	outputFilter: filterString,
	"tojson":     filterToJSON,
	"trim":       filterTrim,
	"string":     filterString,
	"join":       filterJoin,
	"length":     filterLength,
	"count":      filterLength,
	"list":       filterList,
	"first":      filterFirst,
	"last":       filterLast,
	"upper":      filterUpper,
	"lower":      filterLower,
	"dictsort":   filterDictsort,
	"sort":       filterSort,
}

// overriddenNames is the set of overriddenFilters' names, for preprocess.
var overriddenNames = func() map[string]bool {
	m := make(map[string]bool, len(overriddenFilters))
	for name := range overriddenFilters {
		m[name] = true
	}
	return m
}()

// arg returns the filter argument given at position pos (counting the
// filtered value as 0) or as keyword name, and whether it was given.
func arg(args []jinja.Value, kwargs map[string]jinja.Value, pos int, name string) (jinja.Value, bool) {
	if pos < len(args) {
		return args[pos], true
	}
	v, ok := kwargs[name]
	return v, ok
}

// filterToJSON is transformers' tojson:
// json.dumps(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False).
func filterToJSON(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("tojson() missing 1 required positional argument: 'x'")
	}
	opts := pyJSONOptions{itemSep: ", ", keySep: ": "}
	if v, ok := arg(args, kwargs, 1, "ensure_ascii"); ok {
		opts.ensureASCII = v.IsTruthy()
	}
	if v, ok := arg(args, kwargs, 2, "indent"); ok && !v.IsNone() {
		opts.indented = true
		switch {
		case v.IsString():
			opts.indent = v.AsString()
		case v.IsInt():
			opts.indent = strings.Repeat(" ", int(max(v.AsInt(), 0)))
		case v.IsBool():
			if v.AsBool() {
				opts.indent = " "
			}
		default:
			return jinja.Undefined(), fmt.Errorf("tojson: indent must be an int or a string, not %s", pyTypeName(v))
		}
		opts.itemSep = ","
	}
	if v, ok := arg(args, kwargs, 3, "separators"); ok && !v.IsNone() {
		if !v.IsList() || v.AsList().Len() != 2 || !v.AsList().Items[0].IsString() || !v.AsList().Items[1].IsString() {
			return jinja.Undefined(), fmt.Errorf("tojson: separators must be a pair of strings")
		}
		opts.itemSep = v.AsList().Items[0].AsString()
		opts.keySep = v.AsList().Items[1].AsString()
	}
	if v, ok := arg(args, kwargs, 4, "sort_keys"); ok {
		opts.sortKeys = v.IsTruthy()
	}
	s, err := encodePyJSON(args[0], opts)
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewString(s), nil
}

// filterTrim is Jinja2's trim: str(value).strip(chars).
func filterTrim(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("trim() missing 1 required positional argument: 'value'")
	}
	s := pyStr(args[0])
	if chars, ok := arg(args, kwargs, 1, "chars"); ok && !chars.IsNone() {
		if !chars.IsString() {
			return jinja.Undefined(), fmt.Errorf("strip arg must be None or str")
		}
		return jinja.NewString(strings.Trim(s, chars.AsString())), nil
	}
	return jinja.NewString(strings.TrimFunc(s, isPySpace)), nil
}

// filterString is Jinja2's string: str(value).
func filterString(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("string() missing 1 required positional argument: 'value'")
	}
	return jinja.NewString(pyStr(args[0])), nil
}

// filterJoin is Jinja2's join(value, d=”, attribute=None) without
// autoescaping: str(d).join(str(item) for item in value).
func filterJoin(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("join() missing 1 required positional argument: 'value'")
	}
	items, err := pyIter(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	sep := ""
	if d, ok := arg(args, kwargs, 1, "d"); ok {
		sep = pyStr(d)
	}
	attr, hasAttr := arg(args, kwargs, 2, "attribute")
	parts := make([]string, len(items))
	for i, item := range items {
		if hasAttr && !attr.IsNone() {
			item = attribute(item, pyStr(attr))
		}
		parts[i] = pyStr(item)
	}
	return jinja.NewString(strings.Join(parts, sep)), nil
}

// filterLength is Jinja2's length/count: len(value).
func filterLength(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("length() missing 1 required positional argument: 'obj'")
	}
	v := args[0]
	switch {
	case v.IsUndefined():
		return jinja.NewInt(0), nil
	case v.IsString():
		return jinja.NewInt(int64(utf8.RuneCountInString(v.AsString()))), nil
	case v.IsList():
		return jinja.NewInt(int64(v.AsList().Len())), nil
	case v.IsDict():
		return jinja.NewInt(int64(v.AsDict().Len())), nil
	}
	return jinja.Undefined(), fmt.Errorf("object of type '%s' has no len()", pyTypeName(v))
}

// filterList is Jinja2's list: list(value).
func filterList(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("list() missing 1 required positional argument: 'value'")
	}
	items, err := pyIter(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	return jinja.NewList(append([]jinja.Value(nil), items...)), nil
}

// filterFirst is Jinja2's first: the first item, undefined when empty.
func filterFirst(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("first() missing 1 required positional argument: 'seq'")
	}
	items, err := pyIter(args[0])
	if err != nil || len(items) == 0 {
		return jinja.Undefined(), err
	}
	return items[0], nil
}

// filterLast is Jinja2's last: the last item, undefined when empty.
func filterLast(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("last() missing 1 required positional argument: 'seq'")
	}
	items, err := pyIter(args[0])
	if err != nil || len(items) == 0 {
		return jinja.Undefined(), err
	}
	return items[len(items)-1], nil
}

// filterUpper is Jinja2's upper: str(value).upper().
func filterUpper(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("upper() missing 1 required positional argument: 's'")
	}
	return jinja.NewString(strings.ToUpper(pyStr(args[0]))), nil
}

// filterLower is Jinja2's lower: str(value).lower().
func filterLower(args []jinja.Value, _ map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("lower() missing 1 required positional argument: 's'")
	}
	return jinja.NewString(strings.ToLower(pyStr(args[0]))), nil
}

// filterDictsort is Jinja2's dictsort(value, case_sensitive=False,
// by="key", reverse=False): the (key, value) pairs sorted by key, or by
// value when the values are all strings, and case-insensitively unless
// asked (str.lower() on both sides), stable as Python's sorted is (Gemma
// 4's template sorts tool arguments with it, whose keys differ in case).
func filterDictsort(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("dictsort() missing 1 required positional argument: 'value'")
	}
	if !args[0].IsDict() {
		return jinja.Undefined(), fmt.Errorf("'%s' object has no attribute 'items'", pyTypeName(args[0]))
	}
	caseSensitive, reverse, byValue := false, false, false
	if v, ok := arg(args, kwargs, 1, "case_sensitive"); ok {
		caseSensitive = v.IsTruthy()
	}
	if v, ok := arg(args, kwargs, 2, "by"); ok {
		switch pyStr(v) {
		case "key":
		case "value":
			byValue = true
		default:
			return jinja.Undefined(), fmt.Errorf("You can only sort by either \"key\" or \"value\"")
		}
	}
	if v, ok := arg(args, kwargs, 3, "reverse"); ok {
		reverse = v.IsTruthy()
	}
	d := args[0].AsDict()
	type item struct {
		key   string
		value jinja.Value
		sort  string
	}
	items := make([]item, len(d.Keys))
	for i, k := range d.Keys {
		it := item{key: k, value: d.Data[k], sort: k}
		if byValue {
			if !it.value.IsString() {
				return jinja.Undefined(), fmt.Errorf("dictsort by value: the value of %q is not a string", k)
			}
			it.sort = it.value.AsString()
		}
		if !caseSensitive {
			it.sort = strings.ToLower(it.sort)
		}
		items[i] = it
	}
	slices.SortStableFunc(items, func(a, b item) int {
		if reverse {
			return strings.Compare(b.sort, a.sort)
		}
		return strings.Compare(a.sort, b.sort)
	})
	out := make([]jinja.Value, len(items))
	for i, it := range items {
		out[i] = jinja.NewList([]jinja.Value{jinja.NewString(it.key), it.value})
	}
	return jinja.NewList(out), nil
}

// filterSort is Jinja2's sort(value, reverse=False, case_sensitive=False,
// attribute=None): the items sorted stably by themselves or by an
// attribute (a dotted path, looked up as make_attrgetter does), strings
// case-insensitively unless asked. The engine's own sort ignores the
// attribute and the case; Ministral 3's template sorts a message's two
// content parts by "type" with it, so an image comes before the text.
// Keys must all be strings or all numbers, as Python can only compare
// those (a TypeError otherwise); a comma-separated attribute list is not
// supported.
func filterSort(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	if len(args) == 0 {
		return jinja.Undefined(), fmt.Errorf("sort() missing 1 required positional argument: 'value'")
	}
	items, err := pyIter(args[0])
	if err != nil {
		return jinja.Undefined(), err
	}
	reverse, caseSensitive, attr := false, false, ""
	if v, ok := arg(args, kwargs, 1, "reverse"); ok {
		reverse = v.IsTruthy()
	}
	if v, ok := arg(args, kwargs, 2, "case_sensitive"); ok {
		caseSensitive = v.IsTruthy()
	}
	if v, ok := arg(args, kwargs, 3, "attribute"); ok && !v.IsNone() && !v.IsUndefined() {
		attr = pyStr(v)
		if strings.Contains(attr, ",") {
			return jinja.Undefined(), fmt.Errorf("sort(attribute=%q): several attributes are not supported", attr)
		}
	}
	keys := make([]jinja.Value, len(items))
	strs, nums := 0, 0
	for i, it := range items {
		k := it
		if attr != "" {
			k = attribute(it, attr)
		}
		switch {
		case k.IsString():
			strs++
			if !caseSensitive {
				k = jinja.NewString(strings.ToLower(k.AsString()))
			}
		case k.IsNumber() || k.IsBool():
			nums++
		}
		keys[i] = k
	}
	if len(items) > 1 && strs != len(items) && nums != len(items) {
		return jinja.Undefined(), fmt.Errorf("'<' not supported between the sort keys of %s", pyTypeName(args[0]))
	}
	order := make([]int, len(items))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		c := compareKeys(keys[a], keys[b])
		if reverse {
			return -c
		}
		return c
	})
	out := make([]jinja.Value, len(items))
	for i, j := range order {
		out[i] = items[j]
	}
	return jinja.NewList(out), nil
}

// compareKeys compares two strings, or two numbers (bools as 0 and 1).
func compareKeys(a, b jinja.Value) int {
	if a.IsString() {
		return strings.Compare(a.AsString(), b.AsString())
	}
	num := func(v jinja.Value) float64 {
		switch {
		case v.IsBool():
			if v.AsBool() {
				return 1
			}
			return 0
		case v.IsInt():
			return float64(v.AsInt())
		}
		return v.AsFloat()
	}
	if a.IsInt() && b.IsInt() {
		return cmp.Compare(a.AsInt(), b.AsInt())
	}
	return cmp.Compare(num(a), num(b))
}

// pyIter lists what a Python for loop over v yields.
func pyIter(v jinja.Value) ([]jinja.Value, error) {
	switch {
	case v.IsUndefined():
		return nil, nil
	case v.IsList():
		return v.AsList().Items, nil
	case v.IsDict():
		keys := v.AsDict().Keys
		out := make([]jinja.Value, len(keys))
		for i, k := range keys {
			out[i] = jinja.NewString(k)
		}
		return out, nil
	case v.IsString():
		var out []jinja.Value
		for _, r := range v.AsString() {
			out = append(out, jinja.NewString(string(r)))
		}
		return out, nil
	}
	return nil, fmt.Errorf("'%s' object is not iterable", pyTypeName(v))
}

// attribute looks a dotted attribute path up the way Jinja2's
// make_attrgetter does for mappings and lists.
func attribute(v jinja.Value, path string) jinja.Value {
	for part := range strings.SplitSeq(path, ".") {
		switch {
		case v.IsDict():
			item, ok := v.AsDict().Get(part)
			if !ok {
				return jinja.Undefined()
			}
			v = item
		default:
			return jinja.Undefined()
		}
	}
	return v
}

// raisedError is what raise_exception returns; Render turns it into a
// *TemplateError with Raised set.
type raisedError struct{ msg string }

func (e *raisedError) Error() string { return e.msg }

func raiseException(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
	msg, ok := arg(args, kwargs, 0, "message")
	if !ok {
		return jinja.Undefined(), fmt.Errorf("raise_exception() missing 1 required positional argument: 'message'")
	}
	return jinja.Undefined(), &raisedError{msg: pyStr(msg)}
}

// strftimeNow returns the strftime_now(format) global reading now.
func strftimeNow(now func() time.Time) builtinFunc {
	return func(args []jinja.Value, kwargs map[string]jinja.Value) (jinja.Value, error) {
		f, ok := arg(args, kwargs, 0, "format")
		if !ok {
			return jinja.Undefined(), fmt.Errorf("strftime_now() missing 1 required positional argument: 'format'")
		}
		if !f.IsString() {
			return jinja.Undefined(), fmt.Errorf("strftime() argument 1 must be str, not %s", pyTypeName(f))
		}
		return jinja.NewString(strftime(now(), f.AsString())), nil
	}
}
