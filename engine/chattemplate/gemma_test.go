package chattemplate

// gemma3Case builds Gemma 3 conversations: an optional system prompt (a
// string or content parts) folded into the first user turn, alternating
// user and assistant ("model") turns whose content is a string or a list
// of text and image parts, and a share of inputs the template refuses
// (roles out of order, content of another type).
func (g *gen) gemma3Case() parityCase {
	c := parityCase{family: "gemma3", bos: "<bos>", eos: "<eos>"}
	c.input.AddGenerationPrompt = g.chance(0.6)
	content := func() any {
		if !g.chance(0.35) {
			return g.text()
		}
		var parts []any
		for range g.between(1, 4) {
			if g.chance(0.3) {
				parts = append(parts, NewObject("type", "image"))
			} else {
				parts = append(parts, NewObject("type", "text", "text", g.text()))
			}
		}
		return parts
	}
	if g.chance(0.5) {
		sys := any(g.text())
		if g.chance(0.3) {
			sys = []any{NewObject("type", "text", "text", g.text())}
		}
		c.input.Messages = append(c.input.Messages, msg("system", sys))
	}
	for i := range g.between(1, 6) {
		role := "user"
		if i%2 == 1 {
			role = "assistant"
		}
		c.input.Messages = append(c.input.Messages, msg(role, content()))
	}
	switch {
	case g.chance(0.06):
		c.note = "roles do not alternate"
		last, _ := c.input.Messages[len(c.input.Messages)-1].Get("role")
		role, _ := last.(string)
		if role == "system" {
			role = "assistant"
		}
		c.input.Messages = append(c.input.Messages, msg(role, g.text()))
		c.expect = expectRaise
	case g.chance(0.04):
		c.note = "content neither string nor list"
		c.input.Messages[len(c.input.Messages)-1].Set("content", pick(g, []any{nil, int64(g.between(-9, 99)), 2.5, true}))
		c.expect = expectRaise
	}
	return c
}
