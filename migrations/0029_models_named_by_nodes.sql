-- Model names a node brings into being with update_models are bounded as a user key's are
-- (migration 0016): at most NEW_MODELS_PER_NODE_PER_DAY per UTC day
-- (src/routes/worker/update-models.ts), counted from the models rows the node created that day.
-- Before, one node key could create models without end (thousands a request, over as many
-- sessions as it liked), growing the public model lists to megabytes and the network view past
-- its statement timeout.
ALTER TABLE models ADD COLUMN created_by_node bigint;
CREATE INDEX models_created_by_node ON models (created_by_node, created_at) WHERE created_by_node IS NOT NULL;
