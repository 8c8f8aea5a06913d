// Package embed serves sentence embeddings from a model directory in the
// sentence-transformers layout: the tokenizer (tokenizer.json, with its
// [CLS] … [SEP], <s> … </s> or … <|endoftext|> template), a BERT-family
// encoder (BERT, RoBERTa, XLM-RoBERTa) or a
// decoder such as Qwen3-Embedding's (engine/model), the pooling and
// normalization its modules.json and 1_Pooling/config.json describe, and
// the prompts of config_sentence_transformers.json. Texts are cut to
// max_seq_length (sentence_bert_config.json), as sentence-transformers
// cuts them, and the cut is reported. CrossEncoder scores query–document
// pairs with a BERT sequence-classification checkpoint (reranking).
package embed
