"""DB-API exceptions shaped like pyodbc's: ``args == (sqlstate, message)``, the message in the ODBC driver's format."""

from __future__ import annotations

_DRIVER = "[Microsoft][ODBC Driver 18 for SQL Server][SQL Server]"


class Warning(Exception):
    pass


class Error(Exception):
    """Base class; ``sqlstate`` and ``number`` (SQL Server message number, 0 for driver errors) are set."""

    sqlstate: str = "HY000"
    number: int = 0


class InterfaceError(Error):
    pass


class DatabaseError(Error):
    pass


class DataError(DatabaseError):
    pass


class OperationalError(DatabaseError):
    pass


class IntegrityError(DatabaseError):
    pass


class InternalError(DatabaseError):
    pass


class ProgrammingError(DatabaseError):
    pass


class NotSupportedError(DatabaseError):
    pass


class UnmodelledStatementError(NotSupportedError):
    """A statement the model does not answer (not one of ``cdckit.dialect.sqlserver.queries``)."""


def server_error(cls: type[Error], sqlstate: str, number: int, message: str,
                 function: str = "SQLExecDirectW") -> Error:
    """An error as pyodbc raises it for a SQL Server message, e.g. ``[42S02] [...][SQL Server]Invalid ... (208)``;
    ``function`` is the ODBC call pyodbc names (SQLDriverConnect for a failed login)."""
    error = cls(sqlstate, f"[{sqlstate}] {_DRIVER}{message} ({number}) ({function})")
    error.sqlstate = sqlstate
    error.number = number
    return error


def invalid_object(name: str) -> Error:
    return server_error(ProgrammingError, "42S02", 208, f"Invalid object name '{name}'.")


def invalid_column(name: str) -> Error:
    return server_error(ProgrammingError, "42S22", 207, f"Invalid column name '{name}'.")


def driver_error(cls: type[Error], sqlstate: str, message: str) -> Error:
    """An error the ODBC driver or driver manager reports (no server message number): ``(sqlstate, message)``."""
    error = cls(sqlstate, message)
    error.sqlstate = sqlstate
    return error


def pyodbc_error(cls: type[Error], message: str, sqlstate: str = "HY000") -> Error:
    """An error pyodbc raises itself (its RaiseErrorV): the arguments are ``(message, sqlstate)``, in that order,
    e.g. ``('ODBC SQL type -155 is not yet supported.  column-index=0  type=-155', 'HY106')``."""
    error = cls(message, sqlstate)
    error.sqlstate = sqlstate
    return error


# Messages of Microsoft's "Database engine events and errors" pages
# (docs/relational-databases/errors-events/database-engine-events-and-errors-*.md in MicrosoftDocs/sql-docs).
# pyodbc picks the class from the SQLSTATE (its sql_state_mapping: 42... ProgrammingError, 28000 InterfaceError) and
# on Linux reads only the first diagnostic record, so a failed login shows the server's first message alone.
def login_failed(user: str) -> Error:
    """Error 18456 (severity 14, SQLSTATE 28000), "Login failed for user '%.*ls'.%.*ls%.*ls": an unknown login or a
    wrong password (the reason, the error's state, goes to the server's error log only, never to the client)."""
    return server_error(InterfaceError, "28000", 18456, f"Login failed for user '{user}'.", "SQLDriverConnect")


def cannot_open_database(database: str) -> Error:
    """Error 4060 (severity 11, SQLSTATE 42000), 'Cannot open database "%.*ls" requested by the login. The login
    failed.': the login is right, but the database named in the connection string does not exist or the login has
    no user in it (its error-log twin is 18456 state 38, "Failed to open the explicitly specified database")."""
    return server_error(ProgrammingError, "42000", 4060, f'Cannot open database "{database}" requested by the '
                        "login. The login failed.", "SQLDriverConnect")


def lob_too_long(length: int, maximum: int) -> Error:
    """Error 7139 (severity 16), "Length of LOB data (%I64d) to be replicated exceeds configured maximum %ld.", with
    the advice SQL Server 2016 and later append: an INSERT or UPDATE that puts more than ``max text repl size``
    bytes into a captured text, ntext, image, varchar(max), nvarchar(max), varbinary(max) or xml column fails."""
    return server_error(ProgrammingError, "42000", 7139, f"Length of LOB data ({length}) to be replicated exceeds "
                        f"configured maximum {maximum}. Use the stored procedure sp_configure to increase the "
                        "configured maximum value for max text repl size option, which defaults to 65536. A "
                        "configured value of -1 indicates no limit, other that the limit imposed by the data type.")
