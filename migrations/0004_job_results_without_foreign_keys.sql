-- job_results keeps node_id and model_id without foreign keys, like the aggregates (0001).
-- Every check of those keys locked the node's and the model's row (FOR KEY SHARE) for each
-- report: a write to the parent's page per report, about a quarter of the database's work
-- for a report under load (measured with EXPLAIN ANALYZE on the batched insert). The ids
-- are right by construction: node_id is the authenticated node's, model_id comes from the
-- models row the service (or the import, by name) found or created, and nodes and models are
-- never deleted.
ALTER TABLE job_results DROP CONSTRAINT job_results_node_id_fkey;
ALTER TABLE job_results DROP CONSTRAINT job_results_model_id_fkey;
