-- A check_node_secret success proves one key at one address: register_node without a
-- credential accepts it once, within its window, and only while that key is still the node's
-- (a key rotation voids it). Before, a check served any number of registrations and survived a
-- rotation. Checks recorded without the key they proved prove nothing: they are dropped.
DELETE FROM node_secret_checks;
ALTER TABLE node_secret_checks ADD COLUMN key_hash text NOT NULL;
