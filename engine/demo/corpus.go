package demo

// corpus is the text the built-in BPE tokenizer learns its merges from:
// some English, some code, some JSON and chat, so that common words,
// indentation and punctuation get tokens of their own.
const corpus = `The quick brown fox jumps over the lazy dog. The dog was not amused, and the fox ran back into the forest.
A language model reads a sequence of tokens and predicts the next one. It does this again and again, one token at a time,
until it produces an end of sequence token or reaches the maximum length that the user asked for.
When you ask a question, the model answers with the most likely words it has learned from the text it was trained on.
This is a small demo model. Its weights are random, so its answers are not meaningful, but the files on disk have the
same format as the real thing: a config, a tokenizer, and the weights of every layer in a safetensors file.
Each layer has an attention block and a feed forward block. The attention block lets every position look at the
positions before it; the feed forward block transforms each position on its own. Between them sit normalization layers
that keep the numbers in a reasonable range. The embedding table turns token ids into vectors, and the output layer
turns the final vectors back into scores over the vocabulary.
Hello, world! How are you today? I am fine, thank you. What is the weather like where you are? It is sunny and warm.
Please write a short poem about the sea. The sea is wide and deep and blue; the waves come in and out again.
Can you help me with my homework? Of course. What is the question? What is two plus two? Two plus two is four.
The numbers one, two, three, four, five, six, seven, eight, nine and ten are written as 1, 2, 3, 4, 5, 6, 7, 8, 9 and 10.
In the year 2024 there were 366 days, because it was a leap year; most years have 365 days and twelve months.

package main

import (
	"fmt"
	"os"
	"strings"
)

// Greet returns a greeting for the given name.
func Greet(name string) string {
	if name == "" {
		return "Hello, world!"
	}
	return fmt.Sprintf("Hello, %s!", strings.TrimSpace(name))
}

func main() {
	for _, arg := range os.Args[1:] {
		fmt.Println(Greet(arg))
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: greet NAME...")
		os.Exit(2)
	}
}

def fibonacci(n):
    """Return the first n Fibonacci numbers."""
    result = []
    a, b = 0, 1
    for _ in range(n):
        result.append(a)
        a, b = b, a + b
    return result


class Counter:
    def __init__(self):
        self.count = 0

    def increment(self, step=1):
        self.count += step
        return self.count


if __name__ == "__main__":
    print(fibonacci(10))
    counter = Counter()
    for i in range(3):
        print(counter.increment())

{"name": "get_weather", "arguments": {"location": "Paris", "unit": "celsius"}}
{"type": "function", "function": {"name": "search", "description": "Search the web", "parameters": {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}}}
System: You are a helpful assistant.
User: What is the capital of France?
Assistant: <think>
The user asks for the capital of France. The answer is Paris.
</think>

The capital of France is Paris.
User: And of Germany?
Assistant: The capital of Germany is Berlin.
`
