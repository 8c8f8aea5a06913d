package hub

import (
	"regexp"
	"strings"
)

// Match reports whether the repo path name matches the allow pattern as
// huggingface_hub's allow_patterns do (Python's fnmatch: "*" and "?" also
// match "/", [seq] and [!seq] classes; a pattern ending in "/" matches
// everything under that folder).
func Match(pattern, name string) bool {
	if strings.HasSuffix(pattern, "/") {
		pattern += "*"
	}
	re, err := regexp.Compile(fnmatchRegexp(pattern))
	if err != nil {
		return false
	}
	return re.MatchString(name)
}

// MatchAny reports whether name matches one of patterns (every name
// matches an empty list).
func MatchAny(patterns []string, name string) bool {
	if len(patterns) == 0 {
		return true
	}
	for _, p := range patterns {
		if Match(p, name) {
			return true
		}
	}
	return false
}

// fnmatchRegexp translates a shell pattern into an anchored regexp.
func fnmatchRegexp(p string) string {
	var b strings.Builder
	b.WriteString(`^(?s:`)
	for i := 0; i < len(p); i++ {
		switch c := p[i]; c {
		case '*':
			b.WriteString(`.*`)
		case '?':
			b.WriteString(`.`)
		case '[':
			j := i + 1
			if j < len(p) && p[j] == '!' {
				j++
			}
			if j < len(p) && p[j] == ']' {
				j++
			}
			for j < len(p) && p[j] != ']' {
				j++
			}
			if j >= len(p) {
				b.WriteString(`\[`)
				continue
			}
			class := p[i+1 : j]
			i = j
			neg := strings.HasPrefix(class, "!")
			if neg {
				class = class[1:]
			}
			class = strings.ReplaceAll(class, `\`, `\\`)
			b.WriteByte('[')
			if neg {
				b.WriteByte('^')
			} else if strings.HasPrefix(class, "^") {
				b.WriteByte('\\')
			}
			b.WriteString(class)
			b.WriteByte(']')
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	b.WriteString(`)$`)
	return b.String()
}
