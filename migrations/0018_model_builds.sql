-- What a node runs for each model it declares (issue 31, docs/worker.md "What a node declares"):
-- the model file's digest and its quantisation, as the worker's backend says (Ollama's
-- /api/tags; a GGUF file's sha256 and file type; a flag for OpenAI-compatible servers). One row
-- per session and model that declared either; the seed system's worker declares neither and has
-- none. A table of its own rather than more arrays beside node_sessions.models; rows go with
-- their session. (Declared since issue 57 in the same statement as the models: nodes_declare,
-- src/nodes/sql/declare.ts.)
-- /network counts the quantisations serving each model (src/jobs/network.ts), and a copy of a
-- job prefers a checker declaring the same quantisation as the node judged (src/verify/copies.ts).
CREATE TABLE session_model_builds (
  session_id   bigint NOT NULL REFERENCES node_sessions (id) ON DELETE CASCADE,
  model_id     integer NOT NULL,
  digest       text,
  quantization text,
  PRIMARY KEY (session_id, model_id),
  CHECK (digest IS NOT NULL OR quantization IS NOT NULL)
);
