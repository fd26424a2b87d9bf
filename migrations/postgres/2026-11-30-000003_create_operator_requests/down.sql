DROP TABLE operator_requests;
