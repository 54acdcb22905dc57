#!/usr/bin/env bash
# Lab only: create testDB.dbo.customers, then enable CDC with the kit's scripts at their defaults.
set -euo pipefail
sqlcmd=(/opt/mssql-tools18/bin/sqlcmd -C -S sqlserver -U sa -P "$MSSQL_SA_PASSWORD" -b)
"${sqlcmd[@]}" -Q "IF DB_ID(N'testDB') IS NULL CREATE DATABASE [testDB];"
"${sqlcmd[@]}" -d testDB -Q "IF OBJECT_ID(N'dbo.customers') IS NULL CREATE TABLE [dbo].[customers] ([id] int NOT NULL PRIMARY KEY, [email] varchar(255) NULL); IF NOT EXISTS (SELECT 1 FROM [dbo].[customers]) INSERT INTO [dbo].[customers] VALUES (1, N'sally@example.com'), (2, N'george@example.com');"
"${sqlcmd[@]}" -i /sql/01_enable_cdc_database.sql
"${sqlcmd[@]}" -d testDB -i /sql/03_enable_cdc_table.sql
echo "lab: CDC enabled on testDB.dbo.customers"
