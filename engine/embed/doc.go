// Package embed serves sentence embeddings from a model directory in the
// sentence-transformers layout: the tokenizer (tokenizer.json, with its
// [CLS] … [SEP] template), a BERT-family encoder (engine/model), and the
// pooling and normalization its modules.json and 1_Pooling/config.json
// describe. Texts are cut to max_seq_length (sentence_bert_config.json),
// as sentence-transformers cuts them, and the cut is reported.
package embed
