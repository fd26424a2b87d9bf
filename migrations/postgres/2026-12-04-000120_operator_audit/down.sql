DROP TABLE server_secrets;
DROP INDEX audit_operator_idx;
DROP INDEX audit_at_idx;
DROP TABLE audit;
