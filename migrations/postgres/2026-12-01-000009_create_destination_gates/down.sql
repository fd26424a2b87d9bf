DROP TABLE destination_gates;
