/* numallm tokenize: print the token ids and pieces of a text under a model's tokenizer. */
#ifndef NM_CMD_TOKENIZE_H
#define NM_CMD_TOKENIZE_H

/* argv[0] is the subcommand name ("tokenize"); the options follow:
 *   -m MODEL (GGUF; a vocabulary-only file is enough), -p TEXT or -f FILE,
 *   --no-bos (add no BOS/EOS), --parse-special (control tokens written in the text become their
 *   ids), --ids-only (print "[id, id, ...]" only).
 * Returns the process exit status: 0 on success, 1 on a bad flag or an unreadable model. */
int cmd_tokenize(int argc, char **argv);

#endif
