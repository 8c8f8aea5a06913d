package grammar

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// Numeric bounds (minimum, maximum, exclusiveMinimum, exclusiveMaximum) are
// enforced by turning the allowed numbers into a pattern, compiled to a DFA
// that a number node runs instead of its usual automaton. Integers take
// any bounds (non-integral ones are rounded inwards); other numbers take
// integral bounds, and are then written without exponent. A non-integral
// bound on a number is refused.

const maxBoundInt = 999_999_999_999_999 // MaxIntDigits nines

type bound struct {
	v    uint64 // magnitude
	excl bool
	set  bool
}

// numberBounds reads the bound keywords of s; ok is false when there are
// none.
func numberBounds(s *object, path string, integer bool) (pattern string, ok bool, err error) {
	var lo, hi *float64
	var loExcl, hiExcl bool
	for _, kw := range []string{"minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"} {
		v, present := s.m[kw]
		if !present {
			continue
		}
		num, isNum := v.(json.Number)
		if !isNum {
			return "", false, fmt.Errorf("grammar: %s at %q is not a number", kw, path)
		}
		f, err := strconv.ParseFloat(num.String(), 64)
		if err != nil || math.Abs(f) > maxBoundInt {
			return "", false, unsupported(kw, path, "bound beyond ±999999999999999")
		}
		if !integer && f != math.Trunc(f) {
			return "", false, unsupported(kw, path, "a non-integral bound on a non-integer number")
		}
		excl := strings.HasPrefix(kw, "exclusive")
		if integer && f != math.Trunc(f) {
			// Round inwards; the bound becomes inclusive.
			if strings.HasSuffix(kw, "inimum") {
				f = math.Ceil(f)
			} else {
				f = math.Floor(f)
			}
			excl = false
		}
		if strings.HasSuffix(kw, "inimum") {
			if lo == nil || f > *lo || f == *lo && excl {
				lo, loExcl = &f, excl
			}
		} else if hi == nil || f < *hi || f == *hi && excl {
			hi, hiExcl = &f, excl
		}
	}
	if lo == nil && hi == nil {
		return "", false, nil
	}
	// Non-negative side: x in [max(lo, 0), hi]; negative side: x = -v in
	// [max(-hi, 0), -lo].
	var alts []string
	if hi == nil || *hi >= 0 {
		b := bound{v: maxBoundInt, set: false}
		if hi != nil {
			b = bound{v: uint64(*hi), excl: hiExcl, set: true}
		}
		a := bound{}
		if lo != nil && *lo >= 0 {
			a = bound{v: uint64(*lo), excl: loExcl, set: true}
		}
		if p := nonNegative(a, b, integer); p != "" {
			alts = append(alts, p)
		}
	}
	if lo == nil || *lo < 0 {
		b := bound{v: maxBoundInt}
		if lo != nil {
			b = bound{v: uint64(-*lo), excl: loExcl, set: true}
		}
		a := bound{}
		if hi != nil && *hi <= 0 {
			a = bound{v: uint64(-*hi), excl: hiExcl, set: true}
		}
		if p := nonNegative(a, b, integer); p != "" {
			alts = append(alts, "-(?:"+p+")")
		}
	}
	if len(alts) == 0 {
		return "", false, fmt.Errorf("grammar: no number at %q satisfies its bounds", path)
	}
	return "^(?:" + strings.Join(alts, "|") + ")$", true, nil
}

// nonNegative is the pattern of the numbers x >= 0 with a <= x <= b (each
// possibly exclusive), "" if there are none.
func nonNegative(a, b bound, integer bool) string {
	if integer {
		lo, hi := a.v, b.v
		if a.excl {
			lo++
		}
		if b.excl {
			if hi == 0 {
				return ""
			}
			hi--
		}
		if lo > hi {
			return ""
		}
		return rangePattern(lo, hi)
	}
	const frac, nonZeroFrac = `(?:\.[0-9]{1,15})?`, `\.[0-9]{0,14}[1-9]`
	var alts []string
	if a.v > b.v || a.v == b.v && (a.excl || b.excl) {
		return ""
	}
	if a.v == b.v {
		return strconv.FormatUint(a.v, 10)
	}
	// Whole part strictly between a and b: any fraction.
	if a.v+1 <= b.v-1 {
		alts = append(alts, "(?:"+rangePattern(a.v+1, b.v-1)+")"+frac)
	}
	// Whole part a: any fraction, or a non-zero one when exclusive.
	if a.excl {
		alts = append(alts, strconv.FormatUint(a.v, 10)+nonZeroFrac)
	} else {
		alts = append(alts, strconv.FormatUint(a.v, 10)+frac)
	}
	// Whole part b: b itself (with an unbounded top, b is the largest whole
	// part the grammar writes, so it takes fractions too).
	switch {
	case !b.set:
		alts = append(alts, strconv.FormatUint(b.v, 10)+frac)
	case !b.excl:
		alts = append(alts, strconv.FormatUint(b.v, 10))
	}
	return strings.Join(alts, "|")
}

// rangePattern matches the decimal integers lo..hi (no leading zeros).
func rangePattern(lo, hi uint64) string {
	var alts []string
	for digits := len(strconv.FormatUint(lo, 10)); digits <= len(strconv.FormatUint(hi, 10)); digits++ {
		first, last := pow10(digits-1), pow10(digits)-1
		if digits == 1 {
			first = 0
		}
		a, b := max(lo, first), min(hi, last)
		if a > b {
			continue
		}
		alts = append(alts, sameLength(strconv.FormatUint(a, 10), strconv.FormatUint(b, 10))...)
	}
	return strings.Join(alts, "|")
}

func pow10(n int) uint64 {
	p := uint64(1)
	for range n {
		p *= 10
	}
	return p
}

// sameLength returns patterns matching the digit strings from lo to hi,
// both of the same length.
func sameLength(lo, hi string) []string {
	if lo == "" {
		return []string{""}
	}
	if lo[0] == hi[0] {
		var out []string
		for _, p := range sameLength(lo[1:], hi[1:]) {
			out = append(out, lo[:1]+p)
		}
		return out
	}
	n := len(lo) - 1
	any := ""
	if n > 0 {
		any = fmt.Sprintf("[0-9]{%d}", n)
	}
	if strings.Trim(lo[1:], "0") == "" && strings.Trim(hi[1:], "9") == "" {
		return []string{fmt.Sprintf("[%c-%c]", lo[0], hi[0]) + any}
	}
	var out []string
	for _, p := range sameLength(lo[1:], strings.Repeat("9", n)) {
		out = append(out, lo[:1]+p)
	}
	if lo[0]+1 <= hi[0]-1 {
		out = append(out, fmt.Sprintf("[%c-%c]", lo[0]+1, hi[0]-1)+any)
	}
	for _, p := range sameLength(strings.Repeat("0", n), hi[1:]) {
		out = append(out, hi[:1]+p)
	}
	return out
}
